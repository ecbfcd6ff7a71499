#!/usr/bin/env bash
# Soak test (not part of CI): 20 grants from a real handnode to a flaky pod for MINUTES
# (default 10). The pod closes, drops, resets, refuses and stalls at random and drives
# fast and slow tool calls; every minute and at the end it prints calls served, redials,
# errors by kind, and the daemon's RSS, descriptors and threads. Exit 1 if the daemon died,
# a reply went astray, or descriptors/threads grew between the first and last minute.
#
#   bash scripts/soak.sh 10
set -euo pipefail
minutes="${1:-10}"
grants="${GRANTS:-20}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build --quiet --bin handnode --example flaky_pod
exec target/debug/examples/flaky_pod --handnode target/debug/handnode \
    --minutes "$minutes" --grants "$grants"
