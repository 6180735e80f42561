# The object store (`--objects s3://…`): symbol files (global/ and
# tenants/<t>/), batches set aside (tenants/<t>/refused/, dead letters).
# Encrypted with the region's key, versioned, logged, TLS only; global
# symbols replicate to the other regions (the global module).

resource "aws_s3_bucket" "objects" {
  #checkov:skip=CKV2_AWS_62:Nothing consumes object events; Kiln reads the bucket on demand.
  bucket        = "${var.name}-${local.account_id}-objects"
  force_destroy = !var.deletion_protection

  tags = local.tags
}

resource "aws_s3_bucket_public_access_block" "objects" {
  bucket = aws_s3_bucket.objects.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "objects" {
  bucket = aws_s3_bucket.objects.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "objects" {
  bucket = aws_s3_bucket.objects.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.this.arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_versioning" "objects" {
  bucket = aws_s3_bucket.objects.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_logging" "objects" {
  bucket        = aws_s3_bucket.objects.id
  target_bucket = aws_s3_bucket.logs.id
  target_prefix = "s3/objects/"
}

resource "aws_s3_bucket_lifecycle_configuration" "objects" {
  bucket = aws_s3_bucket.objects.id

  # Multipart uploads (objects of 8 MiB or more) a node died in the middle
  # of.
  rule {
    id     = "abort-incomplete-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  rule {
    id     = "expire-old-versions"
    status = "Enabled"

    filter {}

    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }
  }

  # Records whose signature did not verify: kept for inspection, then
  # deleted (a tenant's own refused records live under tenants/).
  rule {
    id     = "expire-unproven-dead-letters"
    status = "Enabled"

    filter {
      prefix = "dead-letters/"
    }

    expiration {
      days = var.dead_letter_expiration_days
    }
  }

  # Symbol files are read when a query meets their frames; Intelligent-
  # Tiering moves the ones nobody reads to cheaper tiers by itself.
  rule {
    id     = "symbols-intelligent-tiering"
    status = "Enabled"

    filter {
      prefix = "global/"
    }

    transition {
      days          = 30
      storage_class = "INTELLIGENT_TIERING"
    }
  }

  depends_on = [aws_s3_bucket_versioning.objects]
}

data "aws_iam_policy_document" "objects_bucket" {
  statement {
    sid       = "DenyPlainHttp"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.objects.arn, "${aws_s3_bucket.objects.arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "objects" {
  bucket = aws_s3_bucket.objects.id
  policy = data.aws_iam_policy_document.objects_bucket.json

  depends_on = [aws_s3_bucket_public_access_block.objects]
}

# Global (distribution) symbols are the same everywhere: each region's
# global/ replicates to every other region's bucket, re-encrypted there
# with that region's key. Tenants' objects never leave the region.
resource "aws_s3_bucket_replication_configuration" "symbols" {
  count = length(var.symbol_replicas) > 0 ? 1 : 0

  bucket = aws_s3_bucket.objects.id
  role   = var.symbol_replication_role_arn

  dynamic "rule" {
    for_each = var.symbol_replicas

    content {
      id       = "global-symbols-to-${rule.value.region}"
      priority = rule.key
      status   = "Enabled"

      filter {
        prefix = "global/"
      }

      delete_marker_replication {
        status = "Disabled"
      }

      source_selection_criteria {
        sse_kms_encrypted_objects {
          status = "Enabled"
        }
      }

      destination {
        bucket        = rule.value.bucket_arn
        storage_class = "STANDARD"

        encryption_configuration {
          replica_kms_key_id = rule.value.kms_key_arn
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = var.symbol_replication_role_arn != null
      error_message = "symbol_replicas needs symbol_replication_role_arn (the global module's symbol_replication_role_arn)."
    }
  }

  depends_on = [aws_s3_bucket_versioning.objects]
}
