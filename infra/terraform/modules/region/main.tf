# A whole Kiln region: network, Kafka (MSK), ScyllaDB nodes, PostgreSQL
# (RDS), an encrypted object bucket, and autoscaled gateway, worker and
# query groups behind one TLS load balancer. See README.md and
# docs/deploy.md.

data "aws_region" "current" {}

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

# The three zones, pinned by name: a zone that is added, or impaired for
# a while, must never move subnets (and ScyllaDB's fixed addresses).
data "aws_availability_zones" "pinned" {
  filter {
    name   = "zone-name"
    values = local.az_names
  }

  lifecycle {
    postcondition {
      condition     = length(self.names) == 3
      error_message = "Zones ${join(", ", local.az_names)} are not all in this region: set availability_zones."
    }
  }
}

locals {
  region     = data.aws_region.current.name
  account_id = data.aws_caller_identity.current.account_id
  partition  = data.aws_partition.current.partition

  tags = merge(var.tags, {
    "kiln:deployment" = var.name
  })

  # Three zones: MSK and ScyllaDB place one replica of three in each.
  az_count = 3
  az_names = var.availability_zones != null ? var.availability_zones : ["${local.region}a", "${local.region}b", "${local.region}c"]
  azs      = data.aws_availability_zones.pinned.names

  public_cidrs  = [for i in range(local.az_count) : cidrsubnet(var.vpc_cidr, 8, i)]
  private_cidrs = [for i in range(local.az_count) : cidrsubnet(var.vpc_cidr, 4, i + 1)]
  data_cidrs    = [for i in range(local.az_count) : cidrsubnet(var.vpc_cidr, 8, 200 + i)]
  nat_count     = var.single_nat_gateway ? 1 : local.az_count

  # DNS names. The regional ones reach this region only; the global ones
  # (from the global module) reach the nearest region, and this region's
  # load balancer answers them too.
  api_hostname    = "api.${var.dns_label}.${var.domain}"
  ingest_hostname = "ingest.${var.dns_label}.${var.domain}"
  # Where each role forwards the requests of other regions' tenants: the
  # same role there (see actors/src/http/region.rs).
  peer_gateways = join(",", [for name, label in var.peer_regions : "${name}=https://ingest.${label}.${var.domain}"])
  peer_queries  = join(",", [for name, label in var.peer_regions : "${name}=https://api.${label}.${var.domain}"])

  # --- Kafka, sized by input -------------------------------------------
  # The topic and consumer group Kiln uses (ingest-bus DEFAULT_TOPIC,
  # actors' CONSUMER_GROUP); on the broker the group is <topic>.<group>.
  kafka_topic          = "kiln-ingest"
  kafka_consumer_group = "${local.kafka_topic}.kiln-ingest"
  # Peak bus bytes per second this region is planned for.
  ingest_bytes_per_s = var.profiled_cores * var.ingest_bytes_per_core_per_s * var.ingest_headroom
  # One worker reads a partition: enough partitions that each carries at
  # most what one worker stores.
  kafka_partitions   = max(var.kafka_min_partitions, ceil(local.ingest_bytes_per_s / var.worker_bytes_per_s))
  kafka_broker_count = local.az_count
  # Every byte is kept kafka_retention_hours, three times (replication),
  # spread over the brokers, with half again for segment overhead.
  kafka_volume_gib = max(
    var.kafka_min_volume_gib,
    ceil(local.ingest_bytes_per_s * 3600 * var.kafka_retention_hours * 3 * 1.5 / local.kafka_broker_count / 1073741824)
  )
  # Kiln publishes records up to 64 MiB (KafkaOptions::max_record_bytes)
  # and asks for 64 KiB more for the batch framing.
  kafka_max_message_bytes = 64 * 1048576 + 65536
  worker_max_size         = min(var.worker_max_size, local.kafka_partitions)

  # --- ScyllaDB ---------------------------------------------------------
  scylla_count = var.profile_store == "scylla" ? var.scylla_node_count : 0
  # Fixed addresses, so that the seed list is known before the nodes are.
  scylla_ips = [
    for i in range(local.scylla_count) :
    cidrhost(local.data_cidrs[i % local.az_count], 10 + floor(i / local.az_count))
  ]
  scylla_seeds = slice(local.scylla_ips, 0, min(3, local.scylla_count))

  # --- Kiln's URLs (see `kiln gateway --help`) ---------------------------
  # ${pg_password} is expanded on the node, from Secrets Manager.
  postgres_url = "postgres://kiln:$${pg_password}@${aws_db_instance.this.address}:${aws_db_instance.this.port}/kiln"
  scylla_url = format(
    "scylla://%s/kiln?replication_factor=3&sample_ttl_days=%d",
    join(",", [for ip in local.scylla_ips : "${ip}:9042"]),
    var.data_retention_days
  )
  store_url   = var.profile_store == "scylla" ? local.scylla_url : local.postgres_url
  bus_url     = "kafka://${aws_msk_cluster.this.bootstrap_brokers}/${local.kafka_topic}?partitions=${local.kafka_partitions}"
  objects_url = "s3://${aws_s3_bucket.objects.id}?region=${local.region}"

  kiln_binary_bucket = regex("^s3://([^/]+)/(.+)$", var.kiln_binary_s3_uri)[0]
  kiln_binary_key    = regex("^s3://([^/]+)/(.+)$", var.kiln_binary_s3_uri)[1]

  # --- The three roles ----------------------------------------------------
  roles = {
    gateway = {
      instance_type = var.gateway_instance_type
      min_size      = var.gateway_min_size
      max_size      = var.gateway_max_size
      # Secrets Manager secrets (of secrets.tf) the role reads into its
      # environment, and whether it reads the PostgreSQL password.
      #checkov:skip=CKV_SECRET_6:These are the names of Secrets Manager secrets (secrets.tf), not secret values.
      secret_env     = { KILN_BUS_KEY = "bus-key", KILN_ADMIN_TOKEN = "admin-token" }
      needs_postgres = true
      env = [
        "KILN_LISTEN=0.0.0.0:7071",
        "KILN_REGION=${var.kiln_region}",
        "KILN_PEER_REGIONS=${local.peer_gateways}",
        "KILN_BUS=${local.bus_url}",
        "KILN_STORE=${local.store_url}",
        "KILN_OBJECTS=${local.objects_url}",
        "KILN_METADATA=${local.postgres_url}",
        "KILN_DEFAULT_RETENTION_DAYS=${var.data_retention_days}",
        "KILN_MIGRATE=${local.postgres_url}",
      ]
    }
    worker = {
      instance_type  = var.worker_instance_type
      min_size       = var.worker_min_size
      max_size       = local.worker_max_size
      secret_env     = { KILN_BUS_KEY = "bus-key" }
      needs_postgres = var.profile_store == "postgres"
      env = concat([
        "KILN_BUS=${local.bus_url}",
        "KILN_STORE=${local.store_url}",
        "KILN_OBJECTS=${local.objects_url}",
        # Workers create or upgrade the profile store's schema before they
        # start: every worker migrates with the same URL, so a race between
        # two first migrations records the same shard count.
        "KILN_MIGRATE=${local.store_url}",
      ], var.debuginfod_urls == "" ? [] : ["DEBUGINFOD_URLS=${var.debuginfod_urls}"])
    }
    query = {
      instance_type  = var.query_instance_type
      min_size       = var.query_min_size
      max_size       = var.query_max_size
      secret_env     = { KILN_ADMIN_TOKEN = "admin-token" }
      needs_postgres = true
      env = concat([
        "KILN_LISTEN=0.0.0.0:7072",
        "KILN_REGION=${var.kiln_region}",
        "KILN_PEER_REGIONS=${local.peer_queries}",
        "KILN_STORE=${local.store_url}",
        "KILN_OBJECTS=${local.objects_url}",
        "KILN_METADATA=${local.postgres_url}",
        "KILN_DEFAULT_RETENTION_DAYS=${var.data_retention_days}",
        "KILN_MIGRATE=${local.postgres_url}",
      ], var.debuginfod_urls == "" ? [] : ["DEBUGINFOD_URLS=${var.debuginfod_urls}"])
    }
  }
  # The roles behind the load balancer, and the names they answer.
  http_roles = {
    gateway = { port = 7071, priority = 10, hosts = [local.ingest_hostname, var.global_ingest_hostname] }
    query   = { port = 7072, priority = 20, hosts = [local.api_hostname, var.global_api_hostname] }
  }
}
