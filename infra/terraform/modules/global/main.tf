# What every region shares: the tenant directory (tenant → home region),
# the global DNS names routed to each region's gateways and query nodes,
# and the IAM role that replicates global symbols between the regions'
# buckets. The module's provider must be in one of the regions: the
# directory's first copy lives there, and the others are replicas.

data "aws_region" "current" {}

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

locals {
  home      = data.aws_region.current.name
  partition = data.aws_partition.current.partition

  tags = merge(var.tags, {
    "kiln:deployment" = var.name
  })

  hostnames = {
    api    = "api.${var.domain}"
    ingest = "ingest.${var.domain}"
  }

  # Each region's global symbols replicate to every other region.
  symbol_replicas = {
    for source in keys(var.regions) : source => [
      for destination, r in var.regions : {
        region      = destination
        bucket_arn  = r.objects_bucket_arn
        kms_key_arn = r.kms_key_arn
      } if destination != source
    ]
  }
}

# --- Tenant directory ---------------------------------------------------
# One item per tenant: {tenant: S, home_region: S}. A tenant's data lives
# only in its home region; gateways and query nodes of other regions look
# the tenant up here to forward or redirect (DESIGN.md, "Regions and
# deployment"). A DynamoDB global table, so every region reads a local
# copy; each copy is encrypted with its region's key.

resource "aws_dynamodb_table" "tenant_directory" {
  name         = "${var.name}-tenant-directory"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "tenant"

  attribute {
    name = "tenant"
    type = "S"
  }

  # Global tables replicate through the stream.
  stream_enabled   = true
  stream_view_type = "NEW_AND_OLD_IMAGES"

  deletion_protection_enabled = var.deletion_protection

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.regions[local.home].kms_key_arn
  }

  dynamic "replica" {
    for_each = { for region, r in var.regions : region => r if region != local.home }

    content {
      region_name            = replica.key
      kms_key_arn            = replica.value.kms_key_arn
      point_in_time_recovery = true
      propagate_tags         = true
    }
  }

  tags = local.tags

  lifecycle {
    precondition {
      condition     = contains(keys(var.regions), local.home)
      error_message = "The global module's provider must be in one of regions (the directory's first copy lives there)."
    }
  }
}

# --- Global DNS ---------------------------------------------------------
# api.<domain> and ingest.<domain> resolve to one region's load balancer:
# the nearest by latency, or by the client's continent. Records follow the
# load balancer's health, so a region that fails drops out.

locals {
  latency_records = {
    for pair in setproduct(keys(local.hostnames), keys(var.regions)) :
    "${pair[0]}-${pair[1]}" => { host = pair[0], region = pair[1], continent = null }
    if var.dns_routing == "latency"
  }
  geo_records = merge(
    {
      for item in flatten([
        for host in keys(local.hostnames) : [
          for region, r in var.regions : [
            for continent in r.continents : { host = host, region = region, continent = continent }
          ]
        ]
      ]) :
      "${item.host}-${item.region}-${item.continent}" => item
      if var.dns_routing == "geo"
    },
    {
      # Route 53's default location ("*"): clients no continent rule claims.
      for host in keys(local.hostnames) :
      "${host}-${var.default_region}-default" => { host = host, region = var.default_region, continent = "*" }
      if var.dns_routing == "geo"
    },
  )
}

resource "aws_route53_record" "global" {
  for_each = merge(local.latency_records, local.geo_records)

  zone_id        = var.route53_zone_id
  name           = local.hostnames[each.value.host]
  type           = "A"
  set_identifier = each.key

  dynamic "latency_routing_policy" {
    for_each = var.dns_routing == "latency" ? [each.value.region] : []

    content {
      region = latency_routing_policy.value
    }
  }

  dynamic "geolocation_routing_policy" {
    for_each = var.dns_routing == "geo" && each.value.continent != "*" ? [each.value.continent] : []

    content {
      continent = geolocation_routing_policy.value
    }
  }

  dynamic "geolocation_routing_policy" {
    for_each = var.dns_routing == "geo" && each.value.continent == "*" ? ["*"] : []

    content {
      country = geolocation_routing_policy.value
    }
  }

  alias {
    name                   = var.regions[each.value.region].alb_dns_name
    zone_id                = var.regions[each.value.region].alb_zone_id
    evaluate_target_health = true
  }

  lifecycle {
    precondition {
      condition     = contains(keys(var.regions), var.default_region)
      error_message = "default_region must be one of regions."
    }
  }
}

# --- Global symbol replication -------------------------------------------
# The role S3 replicates with: it may read global/ of every region's
# bucket and write replicas there, and use the regions' keys for it.
# Each region module attaches the rules for its own bucket.

data "aws_iam_policy_document" "replication_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["s3.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_iam_role" "symbol_replication" {
  name               = "${var.name}-symbol-replication"
  path               = "/kiln/"
  assume_role_policy = data.aws_iam_policy_document.replication_assume.json

  tags = local.tags
}

data "aws_iam_policy_document" "symbol_replication" {
  statement {
    sid       = "ReadReplicationSettings"
    actions   = ["s3:GetReplicationConfiguration", "s3:ListBucket"]
    resources = [for r in values(var.regions) : r.objects_bucket_arn]
  }

  statement {
    sid = "ReadGlobalSymbols"
    actions = [
      "s3:GetObjectVersionForReplication",
      "s3:GetObjectVersionAcl",
      "s3:GetObjectVersionTagging",
    ]
    resources = [for r in values(var.regions) : "${r.objects_bucket_arn}/global/*"]
  }

  statement {
    sid = "WriteGlobalSymbolReplicas"
    actions = [
      "s3:ReplicateObject",
      "s3:ReplicateTags",
    ]
    resources = [for r in values(var.regions) : "${r.objects_bucket_arn}/global/*"]
  }

  statement {
    sid       = "UseTheRegionsKeysThroughS3"
    actions   = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"]
    resources = [for r in values(var.regions) : r.kms_key_arn]

    condition {
      test     = "StringLike"
      variable = "kms:ViaService"
      values   = ["s3.*.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "symbol_replication" {
  name   = "replicate-global-symbols"
  role   = aws_iam_role.symbol_replication.id
  policy = data.aws_iam_policy_document.symbol_replication.json
}
