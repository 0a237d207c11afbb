#!/bin/sh
# The egress proxy's figures: throughput through the proxy vs
# direct (spliced and user-space-copied), added connect latency, 1,000
# concurrent tunnels, memory of 200 idle listeners.
#   packaging/bench-egress.sh [MiB] [rounds] [rates]
#   (defaults: 1024 = 1 GiB, 3 rounds, rates 0,1,10,15,20 Gbit/s)
# Rate 0 is an unpaced test host: a thread on the same two cores, so that
# figure is this machine's CPU. The others pace the test host's sending
# socket at that many Gbit/s, as a server behind a link of that speed.
# Always on loopback (no root needed). As root, then again with the
# upstream a test host in a network namespace of its own, reached over
# veth pairs on 198.51.100.0/30 and 198.51.100.4/30 that exist only
# between namespaces this script creates and removes (the host's own
# interfaces and routes are not touched).
set -eu
cd "$(dirname "$0")/.."
# 1,000 tunnels hold ~4,000 sockets (and the spliced ones 4 pipe fds each).
ulimit -n 65536 2>/dev/null || ulimit -n 16384 2>/dev/null || true
MIB=${1:-1024}
ROUNDS=${2:-3}
RATES=${3:-0,1,10,15,20}
cargo build --release -q -p vibe-hooks --example bench_egress
BIN=target/release/examples/bench_egress
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== loopback"
"$BIN" "$MIB" "$ROUNDS" --rates "$RATES"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$(id -u)" != 0 ]; then
    echo "== netns layout skipped (needs root)"
    exit 0
fi
UP=vibe-bench-egress-up PX=vibe-bench-egress-px CL=vibe-bench-egress-cl
cleanup() {
    for ns in "$UP" "$PX" "$CL"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM
cleanup
for ns in "$UP" "$PX" "$CL"; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
ip -n "$PX" link add px0 type veth peer name up0 netns "$UP"
ip -n "$CL" link add cl0 type veth peer name up1 netns "$UP"
ip -n "$PX" addr add 198.51.100.1/30 dev px0
ip -n "$UP" addr add 198.51.100.2/30 dev up0
ip -n "$CL" addr add 198.51.100.5/30 dev cl0
ip -n "$UP" addr add 198.51.100.6/30 dev up1
ip -n "$PX" link set px0 up
ip -n "$CL" link set cl0 up
ip -n "$UP" link set up0 up
ip -n "$UP" link set up1 up
echo "== netns: test host over veth"
"$BIN" "$MIB" "$ROUNDS" --rates "$RATES" --netns "/run/netns/$UP,/run/netns/$PX,/run/netns/$CL"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
