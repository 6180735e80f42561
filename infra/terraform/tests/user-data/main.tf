# Renders the region module's node boot script for each role with sample
# values, so that check.sh can run `bash -n` on what nodes will run. No
# provider: `tofu apply` here only evaluates these outputs.

terraform {
  required_version = ">= 1.6.0"
}

locals {
  postgres_url = "postgres://kiln:$${pg_password}@kiln-eu.example.eu-west-1.rds.amazonaws.com:5432/kiln"
  scylla_url   = "scylla://10.40.200.10:9042,10.40.201.10:9042,10.40.202.10:9042/kiln?replication_factor=3&sample_ttl_days=30"
  bus_url      = "kafka://b-1.kiln-eu.example:9092,b-2.kiln-eu.example:9092/kiln-ingest?partitions=12"
  objects_url  = "s3://kiln-eu-123456789012-objects?region=eu-west-1"

  roles = {
    gateway = {
      env        = ["KILN_LISTEN=0.0.0.0:7071", "KILN_REGION=eu", "KILN_PEER_REGIONS=us=https://ingest.us.example.com,ap=https://ingest.ap.example.com", "KILN_BUS=${local.bus_url}", "KILN_STORE=${local.scylla_url}", "KILN_OBJECTS=${local.objects_url}", "KILN_METADATA=${local.postgres_url}", "KILN_MIGRATE=${local.postgres_url}"]
      secret_env = { KILN_BUS_KEY = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kiln-eu/bus-key", KILN_ADMIN_TOKEN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kiln-eu/admin-token" }
      postgres   = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kiln-eu/postgres-password"
    }
    worker = {
      env        = ["KILN_BUS=${local.bus_url}", "KILN_STORE=${local.scylla_url}", "KILN_OBJECTS=${local.objects_url}", "KILN_MIGRATE=${local.scylla_url}", "DEBUGINFOD_URLS=https://debuginfod.debian.net https://debuginfod.ubuntu.com"]
      secret_env = { KILN_BUS_KEY = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kiln-eu/bus-key" }
      postgres   = ""
    }
    query = {
      env        = ["KILN_LISTEN=0.0.0.0:7072", "KILN_REGION=eu", "KILN_PEER_REGIONS=us=https://api.us.example.com", "KILN_STORE=${local.postgres_url}", "KILN_OBJECTS=${local.objects_url}", "KILN_METADATA=${local.postgres_url}", "KILN_MIGRATE=${local.postgres_url}"]
      secret_env = { KILN_ADMIN_TOKEN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kiln-eu/admin-token" }
      postgres   = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kiln-eu/postgres-password"
    }
  }
}

output "user_data" {
  description = "Each role's boot script, as the region module renders it."
  value = {
    for role, r in local.roles : role => templatefile("${path.module}/../../modules/region/templates/node.sh.tftpl", {
      role                = role
      region              = "eu-west-1"
      binary_s3_uri       = "s3://kiln-artifacts/kiln/0.1.0/kiln"
      binary_sha256       = "0000000000000000000000000000000000000000000000000000000000000000"
      env                 = r.env
      secret_env          = r.secret_env
      postgres_secret_arn = r.postgres
      s3_secret_arn       = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kiln-eu/${role}/s3-credentials"
    })
  }
}
