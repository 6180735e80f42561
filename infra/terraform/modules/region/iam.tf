# Instance roles: each Kiln role's nodes may read their own secrets (and
# decrypt them through Secrets Manager only), fetch the kiln binary, and
# be reached through Session Manager; nothing else. S3 access to the
# object bucket goes through the keys in secrets.tf.

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "node" {
  for_each = local.roles

  name               = "${var.name}-${each.key}"
  path               = "/kiln/"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json

  tags = local.tags
}

data "aws_iam_policy_document" "node" {
  for_each = local.roles

  statement {
    sid     = "ReadThisRolesSecrets"
    actions = ["secretsmanager:GetSecretValue"]
    resources = concat(
      [for name in values(each.value.secret_env) : aws_secretsmanager_secret.generated[name].arn],
      each.value.needs_postgres ? [aws_secretsmanager_secret.generated["postgres-password"].arn] : [],
      [aws_secretsmanager_secret.objects[each.key].arn],
    )
  }

  statement {
    sid       = "DecryptThemThroughSecretsManager"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.this.arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${local.region}.amazonaws.com"]
    }
  }

  statement {
    sid       = "FetchTheKilnBinary"
    actions   = ["s3:GetObject"]
    resources = ["arn:${local.partition}:s3:::${local.kiln_binary_bucket}/${local.kiln_binary_key}"]
  }
}

resource "aws_iam_role_policy" "node" {
  for_each = local.roles

  name   = "kiln-${each.key}"
  role   = aws_iam_role.node[each.key].id
  policy = data.aws_iam_policy_document.node[each.key].json
}

resource "aws_iam_role_policy_attachment" "node_ssm" {
  for_each = local.roles

  role       = aws_iam_role.node[each.key].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "node" {
  for_each = local.roles

  name = "${var.name}-${each.key}"
  path = "/kiln/"
  role = aws_iam_role.node[each.key].name

  tags = local.tags
}

# ScyllaDB nodes: Session Manager only.
resource "aws_iam_role" "scylla" {
  count = local.scylla_count > 0 ? 1 : 0

  name               = "${var.name}-scylla"
  path               = "/kiln/"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json

  tags = local.tags
}

resource "aws_iam_role_policy_attachment" "scylla_ssm" {
  count = local.scylla_count > 0 ? 1 : 0

  role       = aws_iam_role.scylla[0].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "scylla" {
  count = local.scylla_count > 0 ? 1 : 0

  name = "${var.name}-scylla"
  path = "/kiln/"
  role = aws_iam_role.scylla[0].name

  tags = local.tags
}

# VPC flow logs write to their log group only.
data "aws_iam_policy_document" "flow_logs_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["vpc-flow-logs.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "flow_logs" {
  name               = "${var.name}-flow-logs"
  path               = "/kiln/"
  assume_role_policy = data.aws_iam_policy_document.flow_logs_assume.json

  tags = local.tags
}

data "aws_iam_policy_document" "flow_logs" {
  statement {
    actions = [
      "logs:CreateLogStream",
      "logs:PutLogEvents",
      "logs:DescribeLogStreams",
    ]
    resources = ["${aws_cloudwatch_log_group.flow.arn}:*"]
  }
}

resource "aws_iam_role_policy" "flow_logs" {
  name   = "write-flow-logs"
  role   = aws_iam_role.flow_logs.id
  policy = data.aws_iam_policy_document.flow_logs.json
}

# RDS enhanced monitoring.
data "aws_iam_policy_document" "rds_monitoring_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["monitoring.rds.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "rds_monitoring" {
  name               = "${var.name}-rds-monitoring"
  path               = "/kiln/"
  assume_role_policy = data.aws_iam_policy_document.rds_monitoring_assume.json

  tags = local.tags
}

resource "aws_iam_role_policy_attachment" "rds_monitoring" {
  role       = aws_iam_role.rds_monitoring.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonRDSEnhancedMonitoringRole"
}
