# One internet-facing load balancer per region, TLS only (443, TLS 1.2+),
# routing by host name: ingest.* to the gateways, api.* (API and UI) to the
# query nodes. The certificate covers the regional and the global names
# and is validated through Route 53.

resource "aws_lb" "this" {
  #checkov:skip=CKV2_AWS_28:No WAF in front: AWS's managed rule sets match binary bodies (zstd agent batches, pprof) as text and block them at random; every Kiln route needs a tenant credential, and bodies are bounded and ingest is metered per tenant by Kiln itself.
  name                       = var.name
  load_balancer_type         = "application"
  internal                   = false
  security_groups            = [aws_security_group.alb.id]
  subnets                    = aws_subnet.public[*].id
  drop_invalid_header_fields = true
  enable_deletion_protection = var.deletion_protection
  # An import waits up to 30 s for its batch to be queryable.
  idle_timeout = 120

  access_logs {
    bucket  = aws_s3_bucket.logs.id
    prefix  = "alb"
    enabled = true
  }

  tags = local.tags

  depends_on = [aws_s3_bucket_policy.logs]
}

resource "aws_lb_target_group" "role" {
  #checkov:skip=CKV_AWS_378:TLS ends at the load balancer; Kiln's roles serve plain HTTP (no TLS listener of their own yet) to it, inside the VPC, from their security groups only.
  for_each = local.http_roles

  name                 = "${var.name}-${each.key}"
  port                 = each.value.port
  protocol             = "HTTP"
  vpc_id               = aws_vpc.this.id
  target_type          = "instance"
  deregistration_delay = 30

  health_check {
    path                = "/healthz"
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  tags = local.tags
}

resource "aws_acm_certificate" "this" {
  domain_name               = local.api_hostname
  subject_alternative_names = [local.ingest_hostname, var.global_api_hostname, var.global_ingest_hostname]
  validation_method         = "DNS"

  tags = local.tags

  lifecycle {
    create_before_destroy = true
  }
}

# Every region's certificate names the global names too, so regions write
# the same validation records: overwriting is expected.
resource "aws_route53_record" "certificate_validation" {
  for_each = {
    for option in aws_acm_certificate.this.domain_validation_options : option.domain_name => option
  }

  zone_id         = var.route53_zone_id
  name            = each.value.resource_record_name
  type            = each.value.resource_record_type
  records         = [each.value.resource_record_value]
  ttl             = 300
  allow_overwrite = true
}

resource "aws_acm_certificate_validation" "this" {
  certificate_arn         = aws_acm_certificate.this.arn
  validation_record_fqdns = [for record in aws_route53_record.certificate_validation : record.fqdn]
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.this.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = aws_acm_certificate_validation.this.certificate_arn

  default_action {
    type = "fixed-response"

    fixed_response {
      content_type = "text/plain"
      message_body = "Kiln: unknown host name; use api.* or ingest.*"
      status_code  = "404"
    }
  }

  tags = local.tags
}

# Every role serves Prometheus metrics at /metrics without a credential
# (for the scraper inside the VPC); their labels name tenants and their
# volumes, so the internet-facing listener answers 404 for that path
# before any host rule forwards it.
resource "aws_lb_listener_rule" "no_metrics" {
  listener_arn = aws_lb_listener.https.arn
  priority     = 1

  action {
    type = "fixed-response"

    fixed_response {
      content_type = "text/plain"
      message_body = "not found"
      status_code  = "404"
    }
  }

  condition {
    path_pattern {
      values = ["/metrics", "/metrics/*"]
    }
  }

  tags = local.tags
}

resource "aws_lb_listener_rule" "role" {
  for_each = local.http_roles

  listener_arn = aws_lb_listener.https.arn
  priority     = each.value.priority

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.role[each.key].arn
  }

  condition {
    host_header {
      values = each.value.hosts
    }
  }

  tags = local.tags
}

# The regional names, which reach this region whatever the global routing
# says (for agents pinned to a region, and for operators).
resource "aws_route53_record" "regional" {
  for_each = {
    api    = local.api_hostname
    ingest = local.ingest_hostname
  }

  zone_id = var.route53_zone_id
  name    = each.value
  type    = "A"

  alias {
    name                   = aws_lb.this.dns_name
    zone_id                = aws_lb.this.zone_id
    evaluate_target_health = true
  }
}
