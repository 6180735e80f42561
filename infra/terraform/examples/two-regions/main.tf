# Kiln in two regions, Europe and North America, with one global layer.
# Each tenant lives in one home region (the tenant directory); agents and
# users reach the nearest region through ingest.<domain> and api.<domain>,
# or a region directly through ingest.<label>.<domain> and api.<label>.<domain>.

provider "aws" {
  alias  = "eu"
  region = var.eu_region
}

provider "aws" {
  alias  = "us"
  region = var.us_region
}

module "global" {
  source = "../../modules/global"

  providers = {
    aws = aws.us
  }

  name                = var.name
  domain              = var.domain
  route53_zone_id     = var.route53_zone_id
  dns_routing         = var.dns_routing
  default_region      = var.us_region
  deletion_protection = var.deletion_protection
  tags                = var.tags

  regions = {
    (var.eu_region) = {
      alb_dns_name       = module.region_eu.alb_dns_name
      alb_zone_id        = module.region_eu.alb_zone_id
      objects_bucket_arn = module.region_eu.objects_bucket_arn
      kms_key_arn        = module.region_eu.kms_key_arn
      continents         = ["EU", "AF", "AS"]
    }
    (var.us_region) = {
      alb_dns_name       = module.region_us.alb_dns_name
      alb_zone_id        = module.region_us.alb_zone_id
      objects_bucket_arn = module.region_us.objects_bucket_arn
      kms_key_arn        = module.region_us.kms_key_arn
      continents         = ["NA", "SA", "OC"]
    }
  }
}

module "region_eu" {
  source = "../../modules/region"

  providers = {
    aws = aws.eu
  }

  name                   = "${var.name}-eu"
  dns_label              = "eu"
  kiln_region            = "eu"
  peer_regions           = { us = "us" }
  domain                 = var.domain
  route53_zone_id        = var.route53_zone_id
  global_api_hostname    = module.global.api_hostname
  global_ingest_hostname = module.global.ingest_hostname
  vpc_cidr               = "10.40.0.0/16"

  profiled_cores = var.eu_profiled_cores
  profile_store  = "scylla"
  scylla_ami_id  = var.eu_scylla_ami_id

  kiln_binary_s3_uri = var.kiln_binary_s3_uri
  kiln_binary_sha256 = var.kiln_binary_sha256

  symbol_replicas             = module.global.symbol_replicas[var.eu_region]
  symbol_replication_role_arn = module.global.symbol_replication_role_arn

  deletion_protection = var.deletion_protection
  tags                = var.tags
}

module "region_us" {
  source = "../../modules/region"

  providers = {
    aws = aws.us
  }

  name                   = "${var.name}-us"
  dns_label              = "us"
  kiln_region            = "us"
  peer_regions           = { eu = "eu" }
  domain                 = var.domain
  route53_zone_id        = var.route53_zone_id
  global_api_hostname    = module.global.api_hostname
  global_ingest_hostname = module.global.ingest_hostname
  vpc_cidr               = "10.41.0.0/16"

  profiled_cores = var.us_profiled_cores
  profile_store  = "scylla"
  scylla_ami_id  = var.us_scylla_ami_id

  kiln_binary_s3_uri = var.kiln_binary_s3_uri
  kiln_binary_sha256 = var.kiln_binary_sha256

  symbol_replicas             = module.global.symbol_replicas[var.us_region]
  symbol_replication_role_arn = module.global.symbol_replication_role_arn

  deletion_protection = var.deletion_protection
  tags                = var.tags
}
