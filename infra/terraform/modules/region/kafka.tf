# The ingest bus: an MSK cluster, one broker per zone. Kiln creates its
# topic (kiln-ingest) with the partition count in KILN_BUS when the topic
# is missing, with the brokers' default replication (3, two in sync).

resource "aws_msk_configuration" "this" {
  name           = "${var.name}-kafka-${replace(var.kafka_version, ".", "-")}"
  kafka_versions = [var.kafka_version]
  description    = "Kiln ${var.name}: replication 3 (2 in sync), Kiln-created topics, 64 MiB records"

  server_properties = <<-PROPERTIES
    auto.create.topics.enable=false
    default.replication.factor=3
    min.insync.replicas=2
    unclean.leader.election.enable=false
    num.partitions=${local.kafka_partitions}
    log.retention.hours=${var.kafka_retention_hours}
    message.max.bytes=${local.kafka_max_message_bytes}
    replica.fetch.max.bytes=${local.kafka_max_message_bytes}
  PROPERTIES

  # A new Kafka version makes a new configuration (named after it) before
  # the old one, which the cluster still uses, goes.
  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_msk_cluster" "this" {
  #checkov:skip=CKV_AWS_81:Kiln's Kafka client (rdkafka in ingest-bus) has no TLS settings yet, so clients use the plaintext listener (TLS_PLAINTEXT keeps a TLS one beside it). Brokers are in data subnets reachable only from the gateway and worker security groups; every record is signed with the bus key (HMAC-SHA256) and workers store only records that verify. Broker-to-broker traffic is TLS.
  cluster_name           = var.name
  kafka_version          = var.kafka_version
  number_of_broker_nodes = local.kafka_broker_count
  # Consumer-lag metrics (SumOffsetLag per consumer group and topic), which
  # the workers scale on, come at the DEFAULT level.
  enhanced_monitoring = "DEFAULT"

  broker_node_group_info {
    instance_type   = var.kafka_instance_type
    client_subnets  = aws_subnet.data[*].id
    security_groups = [aws_security_group.kafka.id]

    storage_info {
      ebs_storage_info {
        volume_size = local.kafka_volume_gib
      }
    }

    connectivity_info {
      public_access {
        type = "DISABLED"
      }
    }
  }

  configuration_info {
    arn      = aws_msk_configuration.this.arn
    revision = aws_msk_configuration.this.latest_revision
  }

  encryption_info {
    encryption_at_rest_kms_key_arn = aws_kms_key.this.arn

    encryption_in_transit {
      client_broker = "TLS_PLAINTEXT"
      in_cluster    = true
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.msk.name
      }
    }
  }

  tags = local.tags
}
