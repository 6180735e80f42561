output "region" {
  description = "The AWS region this module was applied in."
  value       = local.region
}

output "vpc_id" {
  description = "The region's VPC."
  value       = aws_vpc.this.id
}

output "alb_dns_name" {
  description = "DNS name of the region's load balancer (the global module aliases the global names to it)."
  value       = aws_lb.this.dns_name
}

output "alb_zone_id" {
  description = "Route 53 zone of the load balancer's DNS name, for alias records."
  value       = aws_lb.this.zone_id
}

output "api_hostname" {
  description = "The region's own name for the query API and the UI (https://<it>/)."
  value       = local.api_hostname
}

output "ingest_hostname" {
  description = "The region's own name for agents and imports (kiln-agent --server https://<it>)."
  value       = local.ingest_hostname
}

output "objects_bucket_name" {
  description = "The object bucket (KILN_OBJECTS)."
  value       = aws_s3_bucket.objects.id
}

output "objects_bucket_arn" {
  description = "ARN of the object bucket, versioned (a replication destination may be named only once versioning is on)."
  value       = aws_s3_bucket.objects.arn

  depends_on = [aws_s3_bucket_versioning.objects]
}

output "kms_key_arn" {
  description = "The region's data key: replicas of global symbols and of the tenant directory in this region are encrypted with it."
  value       = aws_kms_key.this.arn
}

output "kafka_bootstrap_brokers" {
  description = "MSK brokers' plaintext listeners, host:port comma separated (in KILN_BUS)."
  value       = aws_msk_cluster.this.bootstrap_brokers
}

output "kafka_topic" {
  description = "The ingest topic."
  value       = local.kafka_topic
}

output "kafka_partitions" {
  description = "Partitions the ingest topic is created with (sized from profiled_cores): also the workers' ceiling."
  value       = local.kafka_partitions
}

output "kafka_consumer_group" {
  description = "The workers' consumer group as the brokers name it (<topic>.kiln-ingest), whose lag the workers scale on."
  value       = local.kafka_consumer_group
}

output "postgres_address" {
  description = "Host name of the PostgreSQL database (user and database kiln)."
  value       = aws_db_instance.this.address
}

output "scylla_contact_points" {
  description = "ScyllaDB nodes' addresses (empty when profile_store is \"postgres\")."
  value       = local.scylla_ips
}

output "autoscaling_group_names" {
  description = "Autoscaling group of each role: gateway, worker, query."
  value       = { for role, group in aws_autoscaling_group.role : role => group.name }
}

output "secret_arns" {
  description = "Secrets Manager secrets of the region, by name (bus-key, admin-token, postgres-password, <role>/s3-credentials)."
  value = merge(
    { for name, secret in aws_secretsmanager_secret.generated : name => secret.arn },
    { for role, secret in aws_secretsmanager_secret.objects : "${role}/s3-credentials" => secret.arn },
  )
}
