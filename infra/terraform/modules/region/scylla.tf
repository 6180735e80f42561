# ScyllaDB nodes for the profile store (when profile_store is "scylla"):
# instance-store NVMe nodes from ScyllaDB's machine image, spread over the
# three zones (Ec2Snitch: the zone is the rack), at fixed addresses so the
# seed list is known up front. Kiln creates the keyspace (replication 3)
# and tables itself (`kiln store migrate`, run by the workers).

resource "aws_instance" "scylla" {
  count = local.scylla_count

  ami                    = var.scylla_ami_id
  instance_type          = var.scylla_instance_type
  subnet_id              = aws_subnet.data[count.index % local.az_count].id
  private_ip             = local.scylla_ips[count.index]
  vpc_security_group_ids = [aws_security_group.scylla[0].id]
  iam_instance_profile   = aws_iam_instance_profile.scylla[0].name
  ebs_optimized          = true
  monitoring             = true

  disable_api_termination = var.deletion_protection

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type = "gp3"
    volume_size = 50
    encrypted   = true
  }

  # scylla-machine-image reads its configuration from user data.
  user_data = jsonencode({
    scylla_yaml = {
      cluster_name    = var.name
      endpoint_snitch = "Ec2Snitch"
      seed_provider = [{
        class_name = "org.apache.cassandra.locator.SimpleSeedProvider"
        parameters = [{ seeds = join(",", local.scylla_seeds) }]
      }]
    }
    start_scylla_on_first_boot = true
  })

  tags = merge(local.tags, { Name = "${var.name}-scylla-${count.index}", "kiln:role" = "scylla" })

  lifecycle {
    # A new image or seed list must not replace a database node: roll
    # nodes one at a time by hand (docs/deploy.md).
    ignore_changes = [ami, user_data]

    precondition {
      condition     = var.scylla_ami_id != null
      error_message = "profile_store \"scylla\" needs scylla_ami_id: ScyllaDB's machine image for this region."
    }
  }
}
