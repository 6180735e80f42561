output "global" {
  description = "The global names and the tenant directory."
  value = {
    api_hostname                = module.global.api_hostname
    ingest_hostname             = module.global.ingest_hostname
    tenant_directory_table_name = module.global.tenant_directory_table_name
    tenant_directory_table_arn  = module.global.tenant_directory_table_arn
    symbol_replication_role_arn = module.global.symbol_replication_role_arn
    symbol_replicas             = module.global.symbol_replicas
  }
}

output "eu" {
  description = "What the European region made: its names, load balancer, stores, Kafka topic sizing, autoscaling groups and secrets."
  value = {
    region                  = module.region_eu.region
    vpc_id                  = module.region_eu.vpc_id
    api_hostname            = module.region_eu.api_hostname
    ingest_hostname         = module.region_eu.ingest_hostname
    alb_dns_name            = module.region_eu.alb_dns_name
    alb_zone_id             = module.region_eu.alb_zone_id
    objects_bucket_name     = module.region_eu.objects_bucket_name
    objects_bucket_arn      = module.region_eu.objects_bucket_arn
    kms_key_arn             = module.region_eu.kms_key_arn
    kafka_bootstrap_brokers = module.region_eu.kafka_bootstrap_brokers
    kafka_topic             = module.region_eu.kafka_topic
    kafka_partitions        = module.region_eu.kafka_partitions
    kafka_consumer_group    = module.region_eu.kafka_consumer_group
    postgres_address        = module.region_eu.postgres_address
    scylla_contact_points   = module.region_eu.scylla_contact_points
    autoscaling_group_names = module.region_eu.autoscaling_group_names
    secret_arns             = module.region_eu.secret_arns
  }
}

output "us" {
  description = "What the American region made: its names, load balancer, stores, Kafka topic sizing, autoscaling groups and secrets."
  value = {
    region                  = module.region_us.region
    vpc_id                  = module.region_us.vpc_id
    api_hostname            = module.region_us.api_hostname
    ingest_hostname         = module.region_us.ingest_hostname
    alb_dns_name            = module.region_us.alb_dns_name
    alb_zone_id             = module.region_us.alb_zone_id
    objects_bucket_name     = module.region_us.objects_bucket_name
    objects_bucket_arn      = module.region_us.objects_bucket_arn
    kms_key_arn             = module.region_us.kms_key_arn
    kafka_bootstrap_brokers = module.region_us.kafka_bootstrap_brokers
    kafka_topic             = module.region_us.kafka_topic
    kafka_partitions        = module.region_us.kafka_partitions
    kafka_consumer_group    = module.region_us.kafka_consumer_group
    postgres_address        = module.region_us.postgres_address
    scylla_contact_points   = module.region_us.scylla_contact_points
    autoscaling_group_names = module.region_us.autoscaling_group_names
    secret_arns             = module.region_us.secret_arns
  }
}
