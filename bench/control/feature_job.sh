#!/bin/sh
# How long a feature change (`sluice features set PORT tso=on|off`) keeps the datapath thread
# from its packets, and how long the request takes: crates/sluice-switch/examples/feature_job.rs
# on an AF_PACKET port on a veth in a fresh namespace. Root only. Wall-clock: run it on a quiet
# machine.
#
# Usage: bench/control/feature_job.sh [CHANGES]   (default 40)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cargo build -q --release -p sluice-switch --example feature_job
exec "$root/target/release/examples/feature_job" "${1:-40}"
