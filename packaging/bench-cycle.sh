#!/usr/bin/env bash
# Create/start/delete cycle time through vibe-shim against plain runc.
#
#   sudo packaging/bench-cycle.sh [CYCLES]      # default 100
#
# One busybox bundle per runtime, process `/bin/true`. Each cycle times
# `create`, `start` and `delete -f` (which waits for the process and removes
# the container), alternating which runtime goes first so neither profits
# from warm caches. Each bundle's config.json is restored before each cycle
# (outside the timing), since vibe-shim rewrites it in place.
#
# vibe-shim gets the client's spec. In the default mode (BENCH_MODE=judged)
# plain runc gets the very spec vibe-shim judged, copied from its state
# directory: the same hooks (vibe-shim's network hook, which also writes
# the TCP bound, and its tmpfs-modes and release hooks, run by runc as
# processes), mounts and network work, so
# the difference is vibe-shim's own cost per verb. BENCH_MODE=bare gives
# runc the client's spec instead: the whole price of the confinement.
#
# Prints both medians, the ratio of the medians (target <= 1.05 in judged
# mode), each phase's median, the median of the per-cycle ratios, and
# vibe-shim's peak RSS before it execs runc.
#
# A third runtime in the rotation shows the floor any wrapper of this design
# pays: a shell script that only execs runc, on runc's spec. Its ratio is
# the cost of one more exec per verb with no work done.
#
# Knobs: VIBE_SHIM_BIN (default target/release/vibe-shim), RUNC (default: runc
# in PATH), BENCH_POLICY (default: the built-in policy, network mode "none",
# so the network hook runs in every cycle), BENCH_MODE (judged or bare).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CYCLES=${1:-100}
SHIM=${VIBE_SHIM_BIN:-$REPO/target/release/vibe-shim}
RUNC=${RUNC:-$(command -v runc || true)}

[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
[ -x "$SHIM" ] || { echo "no vibe-shim at $SHIM: cargo build --release" >&2; exit 1; }
[ -x "$RUNC" ] || { echo "no runc found (set RUNC=)" >&2; exit 1; }
[ -x /bin/busybox ] || { echo "/bin/busybox missing: apt-get install busybox-static" >&2; exit 1; }
if ! [[ $CYCLES =~ ^[1-9][0-9]*$ ]]; then
    echo "CYCLES must be a positive number" >&2
    exit 1
fi

WORK=$(mktemp -d /tmp/vibe-bench.XXXXXX)
chmod 755 "$WORK"
ROOT=$WORK/runc-root
cleanup() {
    local id
    for id in $("$RUNC" --root "$ROOT" list -q 2>/dev/null); do
        "$RUNC" --root "$ROOT" delete -f "$id" >/dev/null 2>&1 || true
    done
    if [ -f "$WORK/policy-true.toml" ]; then
        "$SHIM" --config "$WORK/policy-true.toml" --root "$ROOT" delete -f bench-judged >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# A busybox-only rootfs inside each bundle (read-only root): vibe-shim
# takes a root filesystem only from inside the bundle (or an overlay mount).
(cd "$WORK" && "$RUNC" spec)
jq '.root.path = "rootfs" | .root.readonly = true
     | .process.terminal = false | .process.args = ["/bin/true"]' \
    "$WORK/config.json" >"$WORK/pristine.json"
for b in runc shim floor; do
    rootfs=$WORK/bundle-$b/rootfs
    mkdir -p "$rootfs"/{bin,etc,proc,sys,dev,tmp,run,root}
    chmod 755 "$rootfs"
    cp /bin/busybox "$rootfs/bin/busybox"
    ln -s busybox "$rootfs/bin/true"
    ln -s busybox "$rootfs/bin/sh"
    cp "$WORK/pristine.json" "$WORK/bundle-$b/config.json"
done

if [ -n "${BENCH_POLICY:-}" ]; then
    POLICY=$BENCH_POLICY
else
    POLICY=$WORK/policy.toml
    printf '[runtime]\npath = "%s"\n\n[audit]\npath = "%s"\n' "$RUNC" "$WORK/audit.jsonl" >"$POLICY"
fi
"$SHIM" policy check --config "$POLICY" >/dev/null
sed -e '/^\[runtime\]/,/^$/d' "$POLICY" >"$WORK/policy-true.toml"
printf '\n[runtime]\npath = "/bin/true"\n' >>"$WORK/policy-true.toml"

MODE=${BENCH_MODE:-judged}
case $MODE in
judged | bare) ;;
*)
    echo "BENCH_MODE must be judged or bare" >&2
    exit 1
    ;;
esac
# The judged spec: a create whose "runc" is /bin/true leaves vibe-shim's
# state directory (its private bundle, the notice runc's copies bind) in
# place for the whole run; it is deleted at exit.
cp "$WORK/pristine.json" "$WORK/bundle-shim/config.json"
"$SHIM" --config "$WORK/policy-true.toml" --root "$ROOT" create --bundle "$WORK/bundle-shim" bench-judged
cp "$WORK/bundle-shim/config.json" "$WORK/judged.json"
cp "$WORK/pristine.json" "$WORK/bundle-shim/config.json"
# runc's spec for cycle ID of KIND: the judged one with that bundle's rootfs
# (the tmpfs-modes hook names it) and that id (the release hook names it),
# or the client's.
spec_for() {
    local kind=$1 id=$2
    if [ "$MODE" = bare ]; then
        cp "$WORK/pristine.json" "$WORK/bundle-$kind/config.json"
        return
    fi
    jq --arg from "$WORK/bundle-shim/rootfs" --arg to "$WORK/bundle-$kind/rootfs" \
        --arg id "$id" '
        .root.path = $to
        | .hooks |= with_entries(.value |= map(
            .args |= (map(if . == $from then $to else . end)
                | if index("release") then .[:-1] + [$id] else . end)))' \
        "$WORK/judged.json" >"$WORK/bundle-$kind/config.json"
}
printf '#!/bin/sh\nexec "%s" "$@"\n' "$RUNC" >"$WORK/floor-wrapper"
chmod 755 "$WORK/floor-wrapper"

# cycle KIND ID: times one cycle; sets LAST to "total create start delete",
# each in microseconds.
cycle() {
    local kind=$1 id=$2 t0 t1 t2 t3
    local -a cmd
    case $kind in
    runc) cmd=("$RUNC" --root "$ROOT") ;;
    shim) cmd=("$SHIM" --config "$POLICY" --root "$ROOT") ;;
    floor) cmd=("$WORK/floor-wrapper" --root "$ROOT") ;;
    esac
    if [ "$kind" = shim ]; then
        cp "$WORK/pristine.json" "$WORK/bundle-shim/config.json"
    else
        spec_for "$kind" "$id"
    fi
    exec 3>>"$WORK/errors"
    t0=$EPOCHREALTIME
    "${cmd[@]}" create --bundle "$WORK/bundle-$kind" "$id" </dev/null >/dev/null 2>&3 &&
        t1=$EPOCHREALTIME &&
        "${cmd[@]}" start "$id" </dev/null >/dev/null 2>&3 &&
        t2=$EPOCHREALTIME &&
        "${cmd[@]}" delete -f "$id" </dev/null >/dev/null 2>&3
    local rc=$?
    t3=$EPOCHREALTIME
    exec 3>&-
    if [ "$rc" != 0 ]; then
        echo "$kind cycle $id failed" >>"$WORK/errors"
        return 1
    fi
    t0=${t0/./} t1=${t1/./} t2=${t2/./} t3=${t3/./}
    # When vibe-shim's own clock starts (its line's main_us) against these.
    [ "$kind" != shim ] || echo "create $t0 start $t1 delete $t2" >>"$WORK/starts"
    LAST="$((t3 - t0)) $((t1 - t0)) $((t2 - t1)) $((t3 - t2))"
}

# run_pair I: one cycle of each runtime, the order rotating with I.
run_pair() {
    local i=$1 kind
    local -a order
    case $((i % 3)) in
    0) order=(runc shim floor) ;;
    1) order=(shim floor runc) ;;
    *) order=(floor runc shim) ;;
    esac
    for kind in "${order[@]}"; do
        cycle "$kind" "bench-$kind-$i" || return 1
        echo "$kind $LAST"
    done
}

echo "warming up (5 untimed cycles each)..." >&2
for i in 1 2 3 4 5; do run_pair "$i" >/dev/null; done || {
    echo "a warm-up cycle failed:" >&2
    cat "$WORK/errors" >&2
    exit 1
}

echo "timing $CYCLES cycles each, alternating..." >&2
: >"$WORK/times"
: >"$WORK/timings.jsonl"
# Exported, not set through env(1): an extra exec would land in vibe-shim's
# "loader" phase. runc and the floor ignore the variable.
export VIBE_SHIM_TIMINGS=$WORK/timings.jsonl
: >"$WORK/starts"
for ((i = 1; i <= CYCLES; i++)); do
    run_pair "$i" >>"$WORK/times" || {
        echo "cycle $i failed:" >&2
        cat "$WORK/errors" >&2
        exit 1
    }
done
unset VIBE_SHIM_TIMINGS

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
runc_med=$(awk '$1 == "runc" { print $2 }' "$WORK/times" | median)
shim_med=$(awk '$1 == "shim" { print $2 }' "$WORK/times" | median)
floor_med=$(awk '$1 == "floor" { print $2 }' "$WORK/times" | median)
phases() { # KIND: median create/start/delete in ms
    local col out=""
    for col in 3 4 5; do
        out+=$(awk -v k="$1" -v c="$col" '$1 == k { print $c }' "$WORK/times" | median | awk '{ printf "%.2f ", $1 / 1000 }')
    done
    echo "$out"
}
read -r rc_create rc_start rc_delete <<<"$(phases runc)"
read -r sh_create sh_start sh_delete <<<"$(phases shim)"
read -r fl_create fl_start fl_delete <<<"$(phases floor)"
# Per-cycle ratios: the n-th shim time over the n-th runc time.
pair_med=$(paste <(awk '$1 == "shim" { print $2 }' "$WORK/times") \
    <(awk '$1 == "runc" { print $2 }' "$WORK/times") |
    awk '{ printf "%.6f\n", $1 / $2 }' | median)

# vibe-shim's own phases (VIBE_SHIM_TIMINGS), median µs per verb: "loader"
# is from the caller's clock before the verb to vibe-shim's main (fork,
# exec, dynamic loading, Rust's runtime start); the phases after it
# are vibe-shim's marks, up to its exec of runc.
phase_table() {
    local verb names line name
    for verb in create start delete; do
        jq -r --arg v "$verb" 'select(.verb == $v)
            | ([.main_us] + (.phases | map("\(.[0])=\(.[1])"))) | join(" ")' \
            "$WORK/timings.jsonl" >"$WORK/t-$verb"
        awk -v v="$verb" '{ for (i = 1; i < NF; i += 2) if ($i == v) print $(i + 1) }' \
            "$WORK/starts" >"$WORK/s-$verb"
        paste -d ' ' "$WORK/s-$verb" "$WORK/t-$verb" | awk '{
                printf "loader %d\n", $2 - $1
                for (i = 3; i <= NF; i++) { split($i, kv, "="); printf "%s %d\n", kv[1], kv[2] }
            }' >"$WORK/p-$verb"
        names=$(awk '!seen[$1]++ { print $1 }' "$WORK/p-$verb")
        line=""
        for name in $names; do
            line+="$name $(awk -v n="$name" '$1 == n { print $2 }' "$WORK/p-$verb" | median) "
        done
        printf "vibe-shim %-6s phases, median us: %s\n" "$verb" "$line"
    done
}

# Peak memory before exec. After execve the kernel keeps the larger of the
# old and new high-water marks in ru_maxrss, so time(1) on a real create
# reports max(vibe-shim, runc). Two views that isolate vibe-shim:
#  - `policy explain`: the same read/parse/rewrite work, no exec at all;
#  - a create whose "runc" is /bin/true (shown alone too, as the floor).
rss() {
    /usr/bin/time -o "$WORK/rss" -f %M "$@" </dev/null >/dev/null 2>&1 || true
    tail -n 1 "$WORK/rss"
}
cp "$WORK/pristine.json" "$WORK/bundle-shim/config.json"
rss_explain=$(rss "$SHIM" policy explain --bundle "$WORK/bundle-shim" --config "$POLICY")
cp "$WORK/pristine.json" "$WORK/bundle-shim/config.json"
rss_create=$(rss "$SHIM" --config "$WORK/policy-true.toml" --root "$ROOT" create --bundle "$WORK/bundle-shim" bench-rss)
"$SHIM" --config "$WORK/policy-true.toml" --root "$ROOT" delete -f bench-rss >/dev/null 2>&1 || true
rss_true=$(rss /bin/true)
rss_runc=$(rss "$RUNC" --version)

awk -v n="$CYCLES" -v r="$runc_med" -v s="$shim_med" -v p="$pair_med" -v f="$floor_med" \
    -v re="$rss_explain" -v rc="$rss_create" -v rt="$rss_true" -v rr="$rss_runc" \
    -v cmd="sudo packaging/bench-cycle.sh $CYCLES" -v mode="$MODE" -v shim="$SHIM" -v runc="$RUNC" \
    -v rp="create $rc_create / start $rc_start / delete $rc_delete" \
    -v sp="create $sh_create / start $sh_start / delete $sh_delete" \
    -v fp="create $fl_create / start $fl_start / delete $fl_delete" 'BEGIN {
    printf "command:   %s\n", cmd
    printf "runtimes:  %s vs %s\n", shim, runc
    printf "cycle:     create + start + delete -f of a policy-compliant busybox bundle running /bin/true\n"
    printf "mode:      %s (runc gets %s)\n", mode, (mode == "judged" ? "the spec vibe-shim judged, hooks and all" : "the client spec")
    printf "runc       median %8.2f ms  (n=%d)\n", r / 1000, n
    printf "vibe-shim  median %8.2f ms  (n=%d)\n", s / 1000, n
    printf "phases, median ms: runc      %s\n", rp
    printf "phases, median ms: vibe-shim %s\n", sp
    printf "phases, median ms: floor     %s\n", fp
    printf "ratio of medians (vibe-shim / runc): %.3f  (target <= 1.05)\n", s / r
    printf "median of per-cycle ratios:          %.3f\n", p
    printf "vibe-shim added per cycle (median):  %.2f ms\n", (s - r) / 1000
    printf "floor (sh exec wrapper): median %.2f ms, ratio %.3f\n", f / 1000, f / r
    printf "peak RSS, vibe-shim policy explain:            %6d KiB\n", re
    printf "peak RSS, vibe-shim create exec-ing /bin/true: %6d KiB (floor: /bin/true alone %d KiB)\n", rc, rt
    printf "peak RSS, runc --version (for scale):          %6d KiB\n", rr
}'
phase_table
