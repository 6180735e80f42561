# PostgreSQL on RDS: the metadata store (tenants, projects, API keys,
# executables) and, when profile_store is "postgres", the profile store.
# Multi-AZ, encrypted, backed up; Kiln creates its schema itself (`kiln
# store migrate`, run by each node before it starts, under a lock).

resource "aws_db_subnet_group" "this" {
  name       = var.name
  subnet_ids = aws_subnet.data[*].id

  tags = local.tags
}

resource "aws_db_parameter_group" "this" {
  name   = "${var.name}-pg${split(".", var.postgres_engine_version)[0]}"
  family = "postgres${split(".", var.postgres_engine_version)[0]}"

  # Kiln's PostgreSQL client (tokio-postgres in storage/src/postgres)
  # connects without TLS for now; the database is reachable only from the
  # Kiln security groups, inside the VPC.
  parameter {
    name  = "rds.force_ssl"
    value = "0"
  }

  # Statements slower than a second, and every schema change.
  parameter {
    name  = "log_min_duration_statement"
    value = "1000"
  }

  parameter {
    name  = "log_statement"
    value = "ddl"
  }

  tags = local.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_db_instance" "this" {
  #checkov:skip=CKV2_AWS_69:Kiln's PostgreSQL client connects without TLS (tokio-postgres NoTls in storage/src/postgres), so rds.force_ssl is 0; traffic stays in the VPC between Kiln's security groups. Turn it on when Kiln speaks TLS to PostgreSQL.
  identifier     = var.name
  engine         = "postgres"
  engine_version = var.postgres_engine_version
  instance_class = var.postgres_instance_class

  allocated_storage     = var.postgres_storage_gib
  max_allocated_storage = var.postgres_max_storage_gib
  storage_type          = "gp3"
  storage_encrypted     = true
  kms_key_id            = aws_kms_key.this.arn

  db_name  = "kiln"
  username = "kiln"
  # Generated into Secrets Manager (secrets.tf); nodes read it from there.
  password = aws_secretsmanager_secret_version.generated["postgres-password"].secret_string

  multi_az               = true
  db_subnet_group_name   = aws_db_subnet_group.this.name
  vpc_security_group_ids = [aws_security_group.postgres.id]
  parameter_group_name   = aws_db_parameter_group.this.name
  publicly_accessible    = false

  backup_retention_period   = var.postgres_backup_days
  copy_tags_to_snapshot     = true
  deletion_protection       = var.deletion_protection
  skip_final_snapshot       = !var.deletion_protection
  final_snapshot_identifier = "${var.name}-final"

  auto_minor_version_upgrade          = true
  iam_database_authentication_enabled = true
  performance_insights_enabled        = true
  performance_insights_kms_key_id     = aws_kms_key.this.arn
  monitoring_interval                 = 60
  monitoring_role_arn                 = aws_iam_role.rds_monitoring.arn
  enabled_cloudwatch_logs_exports     = ["postgresql", "upgrade"]

  tags = local.tags

  depends_on = [aws_cloudwatch_log_group.postgres]
}
