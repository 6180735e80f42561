# Gateways, workers and query nodes: one launch template and one
# autoscaling group per role, in the private subnets, on Amazon Linux 2023.
# Scaling policies are in autoscaling.tf.

data "aws_ssm_parameter" "al2023" {
  name = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
}

resource "aws_launch_template" "role" {
  for_each = local.roles

  name                   = "${var.name}-${each.key}"
  description            = "Kiln ${var.name}: kiln ${each.key}"
  image_id               = data.aws_ssm_parameter.al2023.insecure_value
  instance_type          = each.value.instance_type
  vpc_security_group_ids = [aws_security_group.role[each.key].id]
  ebs_optimized          = true
  update_default_version = true

  iam_instance_profile {
    arn = aws_iam_instance_profile.node[each.key].arn
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  monitoring {
    enabled = true
  }

  block_device_mappings {
    device_name = "/dev/xvda"

    ebs {
      volume_type           = "gp3"
      volume_size           = 30
      encrypted             = true
      delete_on_termination = true
    }
  }

  user_data = base64encode(templatefile("${path.module}/templates/node.sh.tftpl", {
    role                = each.key
    region              = local.region
    binary_s3_uri       = var.kiln_binary_s3_uri
    binary_sha256       = var.kiln_binary_sha256
    env                 = each.value.env
    secret_env          = { for env_name, secret in each.value.secret_env : env_name => aws_secretsmanager_secret.generated[secret].arn }
    postgres_secret_arn = each.value.needs_postgres ? aws_secretsmanager_secret.generated["postgres-password"].arn : ""
    s3_secret_arn       = aws_secretsmanager_secret.objects[each.key].arn
  }))

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-${each.key}", "kiln:role" = each.key })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(local.tags, { Name = "${var.name}-${each.key}", "kiln:role" = each.key })
  }

  tags = local.tags
}

resource "aws_autoscaling_group" "role" {
  for_each = local.roles

  name                = "${var.name}-${each.key}"
  min_size            = each.value.min_size
  max_size            = each.value.max_size
  vpc_zone_identifier = aws_subnet.private[*].id

  # Gateways and query nodes are replaced when the load balancer finds
  # them unhealthy (/healthz); workers, which serve no HTTP, when EC2 does.
  target_group_arns         = [for role, tg in aws_lb_target_group.role : tg.arn if role == each.key]
  health_check_type         = contains(keys(local.http_roles), each.key) ? "ELB" : "EC2"
  health_check_grace_period = 180
  default_instance_warmup   = 120

  # GroupInServiceInstances is the divisor of the workers' lag per worker.
  metrics_granularity = "1Minute"
  enabled_metrics = [
    "GroupDesiredCapacity",
    "GroupInServiceInstances",
    "GroupMaxSize",
    "GroupMinSize",
    "GroupPendingInstances",
    "GroupTerminatingInstances",
    "GroupTotalInstances",
  ]

  launch_template {
    id      = aws_launch_template.role[each.key].id
    version = aws_launch_template.role[each.key].latest_version
  }

  # A new launch template version (binary, image, settings) rolls the
  # group, two thirds staying in service.
  instance_refresh {
    strategy = "Rolling"

    preferences {
      min_healthy_percentage = 66
    }
  }

  dynamic "tag" {
    for_each = merge(local.tags, { Name = "${var.name}-${each.key}", "kiln:role" = each.key })

    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    # The scaling policies own the desired capacity.
    ignore_changes = [desired_capacity]

    precondition {
      condition     = each.value.min_size >= 1 && each.value.min_size <= each.value.max_size
      error_message = "${each.key}: min_size must be at least 1 and at most max_size (workers: at most the topic's ${local.kafka_partitions} partitions)."
    }
  }
}
