# Secrets, in Secrets Manager under <name>/…, encrypted with the region's
# key; nodes read the ones their role needs at boot (templates/node.sh.tftpl)
# into a root-only environment file. Nothing secret is in user data.
#
# - bus-key: signs bus records (gateways) and verifies them (workers);
# - admin-token: the operator's token (gateways, query nodes; the UI's
#   sessions are signed with a key derived from it);
# - postgres-password: the RDS user "kiln";
# - <role>/s3-credentials: the S3 keys each role's `--objects` store uses.

locals {
  generated_secrets = toset(["bus-key", "admin-token", "postgres-password"])
}

# Read once: the version below keeps the first value it was given.
data "aws_secretsmanager_random_password" "generated" {
  for_each = local.generated_secrets

  password_length     = 48
  exclude_punctuation = true
}

resource "aws_secretsmanager_secret" "generated" {
  #checkov:skip=CKV2_AWS_57:Kiln reads these at start-up only; rotating one means a rolling restart of the roles that read it (docs/deploy.md, "Rotating secrets"), not a Lambda rotation.
  for_each = local.generated_secrets

  name                    = "${var.name}/${each.key}"
  description             = "Kiln ${var.name}: ${each.key}"
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7

  tags = local.tags
}

resource "aws_secretsmanager_secret_version" "generated" {
  for_each = local.generated_secrets

  secret_id     = aws_secretsmanager_secret.generated[each.key].id
  secret_string = data.aws_secretsmanager_random_password.generated[each.key].random_password

  lifecycle {
    # The random password data source answers anew at every plan.
    ignore_changes = [secret_string]
  }
}

# S3 credentials. Kiln's S3 client reads AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) once, at start-up, and
# does not refresh them, so an instance role's temporary credentials
# would expire under it: each role gets an IAM user limited to the
# object bucket, whose key lives here.
resource "aws_iam_user" "objects" {
  #checkov:skip=CKV_AWS_273:Kiln's S3 client takes static keys from its environment at start-up and cannot refresh instance-role credentials; these users hold no console access and only the object bucket's permissions (through aws_iam_group.objects).
  for_each = local.roles

  name = "${var.name}-${each.key}-objects"
  path = "/kiln/"

  tags = local.tags
}

resource "aws_iam_group" "objects" {
  name = "${var.name}-objects"
  path = "/kiln/"
}

resource "aws_iam_user_group_membership" "objects" {
  for_each = local.roles

  user   = aws_iam_user.objects[each.key].name
  groups = [aws_iam_group.objects.name]
}

data "aws_iam_policy_document" "objects_access" {
  statement {
    sid       = "ListTheBucket"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.objects.arn]
  }

  statement {
    sid = "ReadAndWriteKilnObjects"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:AbortMultipartUpload",
    ]
    resources = [
      "${aws_s3_bucket.objects.arn}/global/*",
      "${aws_s3_bucket.objects.arn}/tenants/*",
      "${aws_s3_bucket.objects.arn}/dead-letters/*",
    ]
  }

  statement {
    sid       = "UseTheBucketKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [aws_kms_key.this.arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_group_policy" "objects" {
  name   = "kiln-objects"
  group  = aws_iam_group.objects.name
  policy = data.aws_iam_policy_document.objects_access.json
}

resource "aws_iam_access_key" "objects" {
  for_each = local.roles

  user = aws_iam_user.objects[each.key].name
}

resource "aws_secretsmanager_secret" "objects" {
  #checkov:skip=CKV2_AWS_57:Rotated by replacing the access key (terraform apply -replace) and rolling the role's nodes (docs/deploy.md), not by a rotation Lambda.
  for_each = local.roles

  name                    = "${var.name}/${each.key}/s3-credentials"
  description             = "Kiln ${var.name}: the ${each.key} role's S3 keys, as environment lines"
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7

  tags = local.tags
}

resource "aws_secretsmanager_secret_version" "objects" {
  for_each = local.roles

  secret_id = aws_secretsmanager_secret.objects[each.key].id
  secret_string = join("\n", [
    "AWS_ACCESS_KEY_ID=${aws_iam_access_key.objects[each.key].id}",
    "AWS_SECRET_ACCESS_KEY=${aws_iam_access_key.objects[each.key].secret}",
    "",
  ])
}
