# One customer-managed key encrypts the region's data at rest: the object
# bucket, MSK, RDS (storage and Performance Insights), Secrets Manager and
# the log groups. Rotated yearly by KMS.

data "aws_iam_policy_document" "kms" {
  #checkov:skip=CKV_AWS_109:A key policy's resource is always the key it is attached to; the account root statement is what lets IAM policies grant use of it.
  #checkov:skip=CKV_AWS_111:A key policy's resource is always the key it is attached to; the account root statement is what lets IAM policies grant use of it.
  #checkov:skip=CKV_AWS_356:A key policy's resource is always the key it is attached to ("*" means this key).
  statement {
    sid       = "AccountAdministersTheKey"
    actions   = ["kms:*"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = ["arn:${local.partition}:iam::${local.account_id}:root"]
    }
  }

  statement {
    sid = "CloudWatchLogsOfThisAccount"
    actions = [
      "kms:Encrypt*",
      "kms:Decrypt*",
      "kms:ReEncrypt*",
      "kms:GenerateDataKey*",
      "kms:Describe*",
    ]
    resources = ["*"]

    principals {
      type        = "Service"
      identifiers = ["logs.${local.region}.amazonaws.com"]
    }

    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values   = ["arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group:*"]
    }
  }
}

resource "aws_kms_key" "this" {
  description             = "Kiln ${var.name}: data at rest"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.kms.json

  tags = local.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.this.key_id
}
