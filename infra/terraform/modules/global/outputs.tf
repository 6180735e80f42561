output "api_hostname" {
  description = "The global name of the query API and UI; give it to every region module (global_api_hostname)."
  value       = local.hostnames.api
}

output "ingest_hostname" {
  description = "The global name agents send to (kiln-agent --server https://<it>); give it to every region module (global_ingest_hostname)."
  value       = local.hostnames.ingest
}

output "tenant_directory_table_name" {
  description = "The tenant directory: a DynamoDB global table with a copy in every region, one item {tenant, home_region} per tenant."
  value       = aws_dynamodb_table.tenant_directory.name
}

output "tenant_directory_table_arn" {
  description = "ARN of the tenant directory's first copy (in the module's provider region)."
  value       = aws_dynamodb_table.tenant_directory.arn
}

output "symbol_replication_role_arn" {
  description = "The IAM role S3 replicates global symbols with; give it to every region module (symbol_replication_role_arn)."
  value       = aws_iam_role.symbol_replication.arn
}

output "symbol_replicas" {
  description = "For each region, the other regions' buckets its global symbols replicate to; give each region module its own entry (symbol_replicas)."
  value       = local.symbol_replicas
}
