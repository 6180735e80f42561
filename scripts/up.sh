#!/usr/bin/env bash
# Sets up, builds and runs `kiln up` (embedded: one process, data on local
# disk). Extra arguments go to `kiln up`, e.g. scripts/up.sh --listen 0.0.0.0:7070
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build-ui.sh
# Without the distributed engines' clients (Kafka, PostgreSQL, ScyllaDB,
# S3): `kiln up` runs on the embedded ones, and the build is minutes shorter.
cargo build --release -p kiln --no-default-features
exec target/release/kiln up "$@"
