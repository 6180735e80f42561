# Security groups: the load balancer takes 443 from the internet; each
# role takes traffic only from the load balancer; the stores take traffic
# only from the roles that use them. Every rule names its reason.

resource "aws_security_group" "alb" {
  name        = "${var.name}-alb"
  description = "Kiln ${var.name}: the public load balancer"
  vpc_id      = aws_vpc.this.id

  tags = merge(local.tags, { Name = "${var.name}-alb" })
}

resource "aws_security_group" "role" {
  for_each = local.roles

  name        = "${var.name}-${each.key}"
  description = "Kiln ${var.name}: ${each.key} nodes"
  vpc_id      = aws_vpc.this.id

  tags = merge(local.tags, { Name = "${var.name}-${each.key}" })
}

resource "aws_security_group" "kafka" {
  name        = "${var.name}-kafka"
  description = "Kiln ${var.name}: MSK brokers"
  vpc_id      = aws_vpc.this.id

  tags = merge(local.tags, { Name = "${var.name}-kafka" })
}

resource "aws_security_group" "postgres" {
  name        = "${var.name}-postgres"
  description = "Kiln ${var.name}: PostgreSQL"
  vpc_id      = aws_vpc.this.id

  tags = merge(local.tags, { Name = "${var.name}-postgres" })
}

resource "aws_security_group" "scylla" {
  count = local.scylla_count > 0 ? 1 : 0

  name        = "${var.name}-scylla"
  description = "Kiln ${var.name}: ScyllaDB nodes"
  vpc_id      = aws_vpc.this.id

  tags = merge(local.tags, { Name = "${var.name}-scylla" })
}

locals {
  scylla_sg = one(aws_security_group.scylla[*].id)

  # Who talks to whom, as (from group, to group, port, reason). Ingress and
  # egress rules are both made from this list.
  flows = merge(
    {
      for role, r in local.http_roles : "alb-to-${role}" => {
        from = aws_security_group.alb.id, to = aws_security_group.role[role].id
        port = r.port, description = "load balancer to ${role} (HTTP, TLS ends at the load balancer)"
      }
    },
    {
      for role in ["gateway", "worker"] : "${role}-to-kafka" => {
        from = aws_security_group.role[role].id, to = aws_security_group.kafka.id
        port = 9092, description = "${role} to the Kafka brokers' plaintext listener"
      }
    },
    {
      for role, r in local.roles : "${role}-to-postgres" => {
        from = aws_security_group.role[role].id, to = aws_security_group.postgres.id
        port = 5432, description = "${role} to PostgreSQL"
      } if r.needs_postgres
    },
    {
      for role in keys(local.roles) : "${role}-to-scylla" => {
        from = aws_security_group.role[role].id, to = local.scylla_sg
        port = 9042, description = "${role} to ScyllaDB (CQL)"
      } if local.scylla_count > 0
    },
    {
      for role in keys(local.roles) : "${role}-to-scylla-shard-aware" => {
        from = aws_security_group.role[role].id, to = local.scylla_sg
        port = 19042, description = "${role} to ScyllaDB (shard-aware CQL port)"
      } if local.scylla_count > 0
    },
    {
      for name in ["scylla-internode"] : name => {
        from = local.scylla_sg, to = local.scylla_sg
        port = 7000, description = "ScyllaDB nodes to each other (gossip, streaming)"
      } if local.scylla_count > 0
    },
  )

  # Groups that may open HTTPS to anywhere: AWS APIs (Secrets Manager),
  # package repositories, debuginfod servers. S3 goes through the endpoint.
  https_out = merge(
    { for role in keys(local.roles) : role => aws_security_group.role[role].id },
    { for name in ["scylla"] : name => local.scylla_sg if local.scylla_count > 0 },
  )
}

resource "aws_vpc_security_group_ingress_rule" "alb_https" {
  for_each = toset(var.allowed_ingress_cidrs)

  security_group_id = aws_security_group.alb.id
  description       = "HTTPS from agents and users"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value

  tags = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "flow" {
  for_each = local.flows

  security_group_id            = each.value.to
  referenced_security_group_id = each.value.from
  description                  = each.value.description
  ip_protocol                  = "tcp"
  from_port                    = each.value.port
  to_port                      = each.value.port

  tags = local.tags
}

resource "aws_vpc_security_group_egress_rule" "flow" {
  for_each = local.flows

  security_group_id            = each.value.from
  referenced_security_group_id = each.value.to
  description                  = each.value.description
  ip_protocol                  = "tcp"
  from_port                    = each.value.port
  to_port                      = each.value.port

  tags = local.tags
}

resource "aws_vpc_security_group_egress_rule" "https_out" {
  for_each = local.https_out

  security_group_id = each.value
  description       = "HTTPS out: AWS APIs, package repositories, debuginfod"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"

  tags = local.tags
}

# S3 through the gateway endpoint: its prefix list, not the internet.
resource "aws_vpc_security_group_egress_rule" "s3_endpoint" {
  for_each = { for role in keys(local.roles) : role => aws_security_group.role[role].id }

  security_group_id = each.value
  description       = "HTTPS to S3 through the VPC endpoint (objects, the kiln binary)"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  prefix_list_id    = aws_vpc_endpoint.s3.prefix_list_id

  tags = local.tags
}
