# Each role scales on the signal that measures its own work:
#
# - workers on the consumer group's lag (records published but not yet
#   stored) per worker: MSK's SumOffsetLag of kiln-ingest, divided by the
#   workers in service, tracked at worker_target_lag_per_worker;
# - query nodes on CPU and on the query API's response time, whichever
#   asks for more nodes;
# - gateways on requests per gateway from the load balancer.
#
# Target tracking scales out when any policy of a group asks, and in only
# when all of them agree.

locals {
  # The lag numerator: MSK's consumer-lag metric, or the one given.
  worker_lag_metric = var.worker_lag_metric != null ? var.worker_lag_metric : {
    namespace = "AWS/Kafka"
    name      = "SumOffsetLag"
    dimensions = {
      "Cluster Name"   = aws_msk_cluster.this.cluster_name
      "Consumer Group" = local.kafka_consumer_group
      "Topic"          = local.kafka_topic
    }
    statistic = "Maximum"
  }
}

resource "aws_autoscaling_policy" "worker_lag" {
  name                      = "${var.name}-worker-consumer-lag"
  autoscaling_group_name    = aws_autoscaling_group.role["worker"].name
  policy_type               = "TargetTrackingScaling"
  estimated_instance_warmup = 120

  target_tracking_configuration {
    target_value = var.worker_target_lag_per_worker

    customized_metric_specification {
      metrics {
        id          = "lag"
        label       = "Records of ${local.kafka_topic} not yet stored"
        return_data = false

        metric_stat {
          stat = local.worker_lag_metric.statistic

          metric {
            namespace   = local.worker_lag_metric.namespace
            metric_name = local.worker_lag_metric.name

            dynamic "dimensions" {
              for_each = local.worker_lag_metric.dimensions

              content {
                name  = dimensions.key
                value = dimensions.value
              }
            }
          }
        }
      }

      metrics {
        id          = "workers"
        label       = "Workers in service"
        return_data = false

        metric_stat {
          stat = "Average"

          metric {
            namespace   = "AWS/AutoScaling"
            metric_name = "GroupInServiceInstances"

            dimensions {
              name  = "AutoScalingGroupName"
              value = aws_autoscaling_group.role["worker"].name
            }
          }
        }
      }

      metrics {
        id          = "lag_per_worker"
        label       = "Consumer lag per worker"
        expression  = "lag / workers"
        return_data = true
      }
    }
  }
}

resource "aws_autoscaling_policy" "query_cpu" {
  name                      = "${var.name}-query-cpu"
  autoscaling_group_name    = aws_autoscaling_group.role["query"].name
  policy_type               = "TargetTrackingScaling"
  estimated_instance_warmup = 120

  target_tracking_configuration {
    target_value = var.query_target_cpu_percent

    predefined_metric_specification {
      predefined_metric_type = "ASGAverageCPUUtilization"
    }
  }
}

resource "aws_autoscaling_policy" "query_latency" {
  name                      = "${var.name}-query-latency"
  autoscaling_group_name    = aws_autoscaling_group.role["query"].name
  policy_type               = "TargetTrackingScaling"
  estimated_instance_warmup = 120

  target_tracking_configuration {
    target_value = var.query_target_latency_seconds

    customized_metric_specification {
      metric_name = "TargetResponseTime"
      namespace   = "AWS/ApplicationELB"
      statistic   = "Average"
      unit        = "Seconds"

      metric_dimension {
        name  = "LoadBalancer"
        value = aws_lb.this.arn_suffix
      }

      metric_dimension {
        name  = "TargetGroup"
        value = aws_lb_target_group.role["query"].arn_suffix
      }
    }
  }
}

resource "aws_autoscaling_policy" "gateway_requests" {
  name                      = "${var.name}-gateway-requests"
  autoscaling_group_name    = aws_autoscaling_group.role["gateway"].name
  policy_type               = "TargetTrackingScaling"
  estimated_instance_warmup = 120

  target_tracking_configuration {
    target_value = var.gateway_target_requests_per_minute

    predefined_metric_specification {
      predefined_metric_type = "ALBRequestCountPerTarget"
      resource_label         = "${aws_lb.this.arn_suffix}/${aws_lb_target_group.role["gateway"].arn_suffix}"
    }
  }
}
