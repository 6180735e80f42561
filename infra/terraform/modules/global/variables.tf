variable "name" {
  description = "Name of the whole deployment, the prefix of the global resources' names (e.g. \"kiln\")."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,22}[a-z0-9]$", var.name))
    error_message = "name must be 3 to 24 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "tags" {
  description = "Tags added to every global resource."
  type        = map(string)
  default     = {}
}

variable "domain" {
  description = "The DNS domain Kiln is served under (e.g. \"kiln.example.com\"): the global names are api.<domain> and ingest.<domain>."
  type        = string
}

variable "route53_zone_id" {
  description = "ID of the Route 53 hosted zone of domain."
  type        = string
}

variable "regions" {
  description = "Every region, by AWS region name, as the region module's outputs give it (load balancer, object bucket, data key); continents (Route 53 continent codes: AF AN AS EU NA OC SA) are the ones geo routing sends to it."
  type = map(object({
    alb_dns_name       = string
    alb_zone_id        = string
    objects_bucket_arn = string
    kms_key_arn        = string
    continents         = optional(list(string), [])
  }))

  validation {
    condition     = length(var.regions) >= 1
    error_message = "regions must name at least one region."
  }
}

variable "dns_routing" {
  description = "How the global names pick a region: \"latency\" (the region with the lowest latency from the client's resolver) or \"geo\" (by the client's continent, each region's continents; others go to default_region)."
  type        = string
  default     = "latency"

  validation {
    condition     = contains(["latency", "geo"], var.dns_routing)
    error_message = "dns_routing must be \"latency\" or \"geo\"."
  }
}

variable "default_region" {
  description = "The region that geo routing sends clients of continents no region claims to; it must be one of regions."
  type        = string
}

variable "deletion_protection" {
  description = "Protects the tenant directory from deletion; turn off only to tear the deployment down."
  type        = bool
  default     = true
}
