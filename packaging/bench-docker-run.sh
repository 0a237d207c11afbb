#!/usr/bin/env bash
# `docker run --rm IMAGE true` through a dockerd, vibe-shim against runc.
#
#   sudo DOCKER_HOST=unix:///run/vt/docker.sock packaging/bench-docker-run.sh [RUNS]   # default 50
#
# Meant for a private dockerd (tests/env/up.sh starts one and registers the
# `vibe-shim` runtime; its $VIBE_TEST_STATE/env names DOCKER_HOST). Without
# DOCKER_HOST the script refuses to run: it never benchmarks whatever dockerd
# the default socket happens to reach.
#
# Each round runs one container under each runtime, alternating which goes
# first, and times the whole client command (create, network, start, wait,
# delete: everything a user waits for). The vibe-shim runtime pays its own
# policy's confinement (hooks, nft rules, the judged spec) on top of its
# per-verb cost, so the ratio is the whole price a user sees.
#
# Prints both medians and their ratio (target <= 1.02), the median of the
# per-round ratios, and the load before and after.
#
# Knobs: BENCH_RUNTIME (default vibe-shim), BENCH_BASE (default runc),
# BENCH_IMAGE (default vibe-busybox:latest, tests/env/up.sh's image),
# BENCH_RUN_ARGS (extra `docker run` arguments for both, word-split).
set -euo pipefail

RUNS=${1:-50}
SHIM_RT=${BENCH_RUNTIME:-vibe-shim}
BASE_RT=${BENCH_BASE:-runc}
IMAGE=${BENCH_IMAGE:-vibe-busybox:latest}
read -ra EXTRA <<<"${BENCH_RUN_ARGS:-}"

[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
[ -n "${DOCKER_HOST:-}" ] || {
    echo "set DOCKER_HOST to a private dockerd (tests/env/up.sh; see \$VIBE_TEST_STATE/env)" >&2
    exit 1
}
if ! [[ $RUNS =~ ^[1-9][0-9]*$ ]]; then
    echo "RUNS must be a positive number" >&2
    exit 1
fi
runtimes=$(docker info --format '{{json .Runtimes}}')
for rt in "$SHIM_RT" "$BASE_RT"; do
    jq -e --arg n "$rt" 'has($n)' <<<"$runtimes" >/dev/null || {
        echo "runtime $rt not registered with $DOCKER_HOST" >&2
        exit 1
    }
done
docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "no image $IMAGE at $DOCKER_HOST" >&2; exit 1; }

WORK=$(mktemp -d /tmp/vibe-bench-docker.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# one RUNTIME: times one `docker run --rm`, in microseconds.
one() {
    local t0 t1
    t0=$EPOCHREALTIME
    docker run --rm --runtime "$1" "${EXTRA[@]}" "$IMAGE" true </dev/null >/dev/null 2>>"$WORK/errors" || {
        echo "docker run --runtime $1 failed:" >&2
        cat "$WORK/errors" >&2
        exit 1
    }
    t1=$EPOCHREALTIME
    echo $((${t1/./} - ${t0/./}))
}

echo "warming up (3 untimed runs each)..." >&2
for _ in 1 2 3; do one "$BASE_RT" >/dev/null; one "$SHIM_RT" >/dev/null; done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "timing $RUNS runs each, alternating..." >&2
: >"$WORK/times"
for ((i = 1; i <= RUNS; i++)); do
    if ((i % 2)); then
        b=$(one "$BASE_RT")
        s=$(one "$SHIM_RT")
    else
        s=$(one "$SHIM_RT")
        b=$(one "$BASE_RT")
    fi
    echo "$b $s" >>"$WORK/times"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
base_med=$(awk '{ print $1 }' "$WORK/times" | median)
shim_med=$(awk '{ print $2 }' "$WORK/times" | median)
pair_med=$(awk '{ printf "%.6f\n", $2 / $1 }' "$WORK/times" | median)
awk -v n="$RUNS" -v b="$base_med" -v s="$shim_med" -v p="$pair_med" \
    -v br="$BASE_RT" -v sr="$SHIM_RT" -v img="$IMAGE" -v extra="${BENCH_RUN_ARGS:-}" \
    -v lb="$load_before" -v la="$load_after" 'BEGIN {
    printf "command:   docker run --rm --runtime RUNTIME %s%s true (n=%d each, alternating)\n", (extra == "" ? "" : extra " "), img, n
    printf "load:      %s before, %s after (1/5/15 min)\n", lb, la
    printf "%-10s median %8.2f ms\n", br, b / 1000
    printf "%-10s median %8.2f ms\n", sr, s / 1000
    printf "ratio of medians (%s / %s): %.3f  (target <= 1.02)\n", sr, br, s / b
    printf "median of per-round ratios:   %.3f\n", p
    printf "added per run (median):       %.2f ms\n", (s - b) / 1000
}'
