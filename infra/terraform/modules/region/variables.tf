# Inputs of one Kiln region. Every variable has a description and a type;
# infra/terraform/crosscheck.py checks that, and that each one is used.

variable "name" {
  description = "Name of this region's deployment, used as the prefix of every resource name (e.g. \"kiln-eu\"): 3 to 24 lowercase letters, digits and hyphens."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,22}[a-z0-9]$", var.name))
    error_message = "name must be 3 to 24 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "tags" {
  description = "Tags added to every resource of the region."
  type        = map(string)
  default     = {}
}

# --- DNS and TLS --------------------------------------------------------

variable "domain" {
  description = "The DNS domain Kiln is served under (e.g. \"kiln.example.com\"); the region's names are api.<dns_label>.<domain> and ingest.<dns_label>.<domain>."
  type        = string
}

variable "dns_label" {
  description = "This region's label in its DNS names (e.g. \"eu\" for api.eu.<domain>)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", var.dns_label))
    error_message = "dns_label must be one DNS label: lowercase letters, digits and inner hyphens."
  }
}

variable "kiln_region" {
  description = "This region's name as Kiln knows it (KILN_REGION): the keys made here are tagged with it (kiln_<name>_...), and every other region forwards requests carrying such keys here."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$", var.kiln_region)) && var.kiln_region != "admin"
    error_message = "kiln_region must be 1 to 32 lowercase letters, digits and inner hyphens, and not \"admin\"."
  }
}

variable "peer_regions" {
  description = "Every other region of the deployment: its kiln_region name mapped to its dns_label. Gateways forward requests with those regions' keys to ingest.<label>.<domain>, query nodes to api.<label>.<domain> (KILN_PEER_REGIONS)."
  type        = map(string)
  default     = {}
}

variable "route53_zone_id" {
  description = "ID of the Route 53 hosted zone of domain: the regional records and the certificate's DNS validation records go there."
  type        = string
}

variable "global_api_hostname" {
  description = "The global (latency- or geo-routed) name of the query API and UI, from the global module; the region's certificate and load balancer answer it too."
  type        = string
}

variable "global_ingest_hostname" {
  description = "The global name agents send to, from the global module; the region's certificate and load balancer answer it too."
  type        = string
}

variable "allowed_ingress_cidrs" {
  description = "IPv4 ranges allowed to reach the load balancer on 443 (agents, users of the UI and API)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

# --- Network ------------------------------------------------------------

variable "vpc_cidr" {
  description = "The region's VPC range, a /16: public subnets take its first three /24s, private subnets three /20s after them, data subnets .200-.202.x /24s."
  type        = string
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrnetmask(var.vpc_cidr)) && endswith(var.vpc_cidr, "/16")
    error_message = "vpc_cidr must be an IPv4 /16."
  }
}

variable "availability_zones" {
  description = "The three availability zones of the region, by name; null: <region>a, <region>b and <region>c (set it where a region lacks one of those)."
  type        = list(string)
  default     = null

  validation {
    condition     = var.availability_zones == null ? true : length(var.availability_zones) == 3
    error_message = "availability_zones must name exactly three zones."
  }
}

variable "single_nat_gateway" {
  description = "One NAT gateway for the region instead of one per availability zone: cheaper, but an outage of its zone cuts the others' way out (AWS APIs are reached through the S3 endpoint and the NAT)."
  type        = bool
  default     = false
}

# --- Sizing by input ----------------------------------------------------

variable "profiled_cores" {
  description = "Peak number of CPU cores profiled by agents sending to this region: Kafka partitions and broker storage, and the workers' ceiling, are sized from it."
  type        = number

  validation {
    condition     = var.profiled_cores >= 1
    error_message = "profiled_cores must be at least 1."
  }
}

variable "ingest_bytes_per_core_per_s" {
  description = "Bytes per second one profiled core puts on the bus (agent batches as sent, zstd): a planning figure, 1 KiB/s by default (19 Hz sampling, dictionaries re-sent per batch); measure yours from the gateway's request bytes and set it."
  type        = number
  default     = 1024
}

variable "ingest_headroom" {
  description = "Factor over the expected peak that partitions, broker storage and the workers' ceiling are sized for."
  type        = number
  default     = 2
}

variable "worker_bytes_per_s" {
  description = "Bus bytes per second one worker writes to the store, sustained (load-tests' distributed_bench measures it): one partition is sized to this, since a partition is read by one worker."
  type        = number
  default     = 2097152
}

# --- Kafka (MSK) --------------------------------------------------------

variable "kafka_version" {
  description = "Apache Kafka version of the MSK cluster."
  type        = string
  default     = "3.6.0"
}

variable "kafka_instance_type" {
  description = "MSK broker instance type."
  type        = string
  default     = "kafka.m7g.large"
}

variable "kafka_min_partitions" {
  description = "Fewest partitions of the ingest topic, whatever the input: the workers' ceiling is never below it."
  type        = number
  default     = 12
}

variable "kafka_retention_hours" {
  description = "Hours the ingest topic keeps records: how long workers may be down before unconsumed batches are lost. Broker storage is sized from it."
  type        = number
  default     = 24
}

variable "kafka_min_volume_gib" {
  description = "Smallest EBS volume per broker, in GiB."
  type        = number
  default     = 100
}

# --- Stores -------------------------------------------------------------

variable "profile_store" {
  description = "Where samples are stored: \"scylla\" (ScyllaDB nodes, for large regions) or \"postgres\" (the same RDS database as the metadata, for small ones)."
  type        = string
  default     = "scylla"

  validation {
    condition     = contains(["scylla", "postgres"], var.profile_store)
    error_message = "profile_store must be \"scylla\" or \"postgres\"."
  }
}

variable "scylla_ami_id" {
  description = "ScyllaDB machine image (AMI) for this region, from ScyllaDB's published images; required when profile_store is \"scylla\"."
  type        = string
  default     = null
}

variable "scylla_instance_type" {
  description = "ScyllaDB node instance type (an instance-store NVMe type: i4i, i3en)."
  type        = string
  default     = "i4i.xlarge"
}

variable "scylla_node_count" {
  description = "ScyllaDB nodes, spread over three availability zones; at least 3 (replication factor 3, LOCAL_QUORUM)."
  type        = number
  default     = 3

  validation {
    condition     = var.scylla_node_count >= 3 && var.scylla_node_count <= 30
    error_message = "scylla_node_count must be between 3 and 30."
  }
}

variable "data_retention_days" {
  description = "Days of profiles kept: Kiln's default tenant retention (--default-retention-days) and the ScyllaDB samples' TTL."
  type        = number
  default     = 30
}

variable "postgres_engine_version" {
  description = "PostgreSQL version of the RDS instance (major, or major.minor)."
  type        = string
  default     = "16"
}

variable "postgres_instance_class" {
  description = "RDS instance class of the PostgreSQL database (metadata: tenants, keys, executables; also samples when profile_store is \"postgres\")."
  type        = string
  default     = "db.r6g.large"
}

variable "postgres_storage_gib" {
  description = "Initial PostgreSQL storage, in GiB (gp3); it grows by itself up to postgres_max_storage_gib."
  type        = number
  default     = 100
}

variable "postgres_max_storage_gib" {
  description = "Ceiling of PostgreSQL storage autoscaling, in GiB."
  type        = number
  default     = 1000
}

variable "postgres_backup_days" {
  description = "Days of automated PostgreSQL backups kept."
  type        = number
  default     = 14
}

# --- Object store -------------------------------------------------------

variable "dead_letter_expiration_days" {
  description = "Days the object store keeps records refused for a bad signature (dead-letters/) before deleting them."
  type        = number
  default     = 30
}

variable "noncurrent_version_expiration_days" {
  description = "Days an overwritten or deleted object's old version is kept."
  type        = number
  default     = 30
}

variable "symbol_replicas" {
  description = "Other regions' object buckets that this region's global symbols (global/) replicate to, from the global module. Empty: no replication."
  type = list(object({
    region      = string
    bucket_arn  = string
    kms_key_arn = string
  }))
  default = []
}

variable "symbol_replication_role_arn" {
  description = "IAM role S3 replicates global symbols with, from the global module; needed when symbol_replicas is not empty."
  type        = string
  default     = null
}

# --- Kiln roles ---------------------------------------------------------

variable "kiln_binary_s3_uri" {
  description = "s3://BUCKET/KEY of the kiln binary (x86_64 Linux, `cargo build --release -p kiln`) every node installs at boot."
  type        = string

  validation {
    condition     = can(regex("^s3://[a-z0-9][a-z0-9.-]+/.+$", var.kiln_binary_s3_uri))
    error_message = "kiln_binary_s3_uri must be s3://BUCKET/KEY."
  }
}

variable "kiln_binary_sha256" {
  description = "SHA-256 of the kiln binary, hex: a node refuses a binary that does not match."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.kiln_binary_sha256))
    error_message = "kiln_binary_sha256 must be 64 lowercase hex digits."
  }
}

variable "debuginfod_urls" {
  description = "debuginfod servers workers and query nodes fetch missing symbols from (DEBUGINFOD_URLS syntax, space separated); empty: none."
  type        = string
  default     = ""
}

variable "gateway_instance_type" {
  description = "Instance type of gateways (`kiln gateway`)."
  type        = string
  default     = "c7i.large"
}

variable "gateway_min_size" {
  description = "Fewest gateways (at least 2: one per zone survives a zone's loss)."
  type        = number
  default     = 2
}

variable "gateway_max_size" {
  description = "Most gateways."
  type        = number
  default     = 12
}

variable "gateway_target_requests_per_minute" {
  description = "Gateways scale to keep this many load-balancer requests per gateway per minute (ALBRequestCountPerTarget): agents send a batch per host every 5 s."
  type        = number
  default     = 1200
}

variable "worker_instance_type" {
  description = "Instance type of workers (`kiln worker`)."
  type        = string
  default     = "c7i.xlarge"
}

variable "worker_min_size" {
  description = "Fewest workers."
  type        = number
  default     = 2
}

variable "worker_max_size" {
  description = "Most workers; the group's ceiling is the smaller of this and the topic's partitions (a partition is read by one worker)."
  type        = number
  default     = 64
}

variable "worker_target_lag_per_worker" {
  description = "Workers scale to keep the consumer group's lag (records not yet stored), divided by the number of workers, at this many records."
  type        = number
  default     = 2000
}

variable "worker_lag_metric" {
  description = "CloudWatch metric the workers scale on instead of MSK's SumOffsetLag, e.g. Kiln's own kiln_worker_consumer_lag_records once published to CloudWatch: its namespace, name, dimensions and statistic, which together must give the group's total lag (each worker reports its own partitions' lag, so: a dimension all workers share, such as AutoScalingGroupName, and statistic Sum). null: MSK's SumOffsetLag of the kiln-ingest consumer group."
  type = object({
    namespace  = string
    name       = string
    dimensions = map(string)
    statistic  = string
  })
  default = null
}

variable "query_instance_type" {
  description = "Instance type of query nodes (`kiln query`): memory for aggregation."
  type        = string
  default     = "r7i.xlarge"
}

variable "query_min_size" {
  description = "Fewest query nodes."
  type        = number
  default     = 2
}

variable "query_max_size" {
  description = "Most query nodes."
  type        = number
  default     = 12
}

variable "query_target_cpu_percent" {
  description = "Query nodes scale to keep their average CPU at this percentage."
  type        = number
  default     = 60
}

variable "query_target_latency_seconds" {
  description = "Query nodes also scale to keep the load balancer's average response time of the query API at this many seconds."
  type        = number
  default     = 1.5
}

# --- Operations ---------------------------------------------------------

variable "log_retention_days" {
  description = "Days CloudWatch log groups (VPC flow logs, MSK broker logs, PostgreSQL logs) and the access-log bucket keep logs."
  type        = number
  default     = 365
}

variable "deletion_protection" {
  description = "Protects the load balancer, the database, the ScyllaDB nodes and the stores from deletion; turn off only to tear a region down."
  type        = bool
  default     = true
}
