variable "name" {
  description = "Name of the deployment: the global resources are named after it, each region <name>-<label>."
  type        = string
  default     = "kiln"
}

variable "domain" {
  description = "The DNS domain Kiln is served under (e.g. \"kiln.example.com\"), delegated to route53_zone_id."
  type        = string
}

variable "route53_zone_id" {
  description = "ID of the Route 53 hosted zone of domain."
  type        = string
}

variable "eu_region" {
  description = "AWS region of the European deployment."
  type        = string
  default     = "eu-west-1"
}

variable "us_region" {
  description = "AWS region of the American deployment; the global resources (tenant directory's first copy, IAM) are made with its provider."
  type        = string
  default     = "us-east-1"
}

variable "eu_profiled_cores" {
  description = "Peak CPU cores profiled by agents sending to the European region."
  type        = number
  default     = 1000
}

variable "us_profiled_cores" {
  description = "Peak CPU cores profiled by agents sending to the American region."
  type        = number
  default     = 1000
}

variable "eu_scylla_ami_id" {
  description = "ScyllaDB's machine image in eu_region."
  type        = string
}

variable "us_scylla_ami_id" {
  description = "ScyllaDB's machine image in us_region."
  type        = string
}

variable "kiln_binary_s3_uri" {
  description = "s3://BUCKET/KEY of the kiln binary (x86_64 Linux) every node installs."
  type        = string
}

variable "kiln_binary_sha256" {
  description = "SHA-256 of the kiln binary, hex."
  type        = string
}

variable "dns_routing" {
  description = "How the global names pick a region: \"latency\" or \"geo\" (Europe, Africa and Asia to eu_region, the rest to us_region)."
  type        = string
  default     = "latency"
}

variable "deletion_protection" {
  description = "Protects databases, stores and load balancers from deletion; false only for a throwaway deployment."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
