#!/bin/sh
# The egress proxy's figures (issue 12): throughput through the proxy vs
# direct, added connect latency, 1,000 concurrent tunnels, memory of 200
# idle listeners. Loopback only; no root needed.
#   packaging/bench-egress.sh [MiB]   (default 1024 = 1 GiB)
set -eu
cd "$(dirname "$0")/.."
# 1,000 tunnels hold ~4,000 sockets in the one process.
ulimit -n 16384 2>/dev/null || true
exec cargo run --release -q -p vibe-hooks --example bench_egress -- "${1:-1024}"
