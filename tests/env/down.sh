#!/usr/bin/env bash
# Stop everything tests/env/up.sh started: containers, dockerd, its managed
# containerd and shims, the bridge and the iptables rules Docker added for it.
# Safe to call twice and after a crash. The image cache in the data-root is
# kept for the next run; VIBE_TEST_PURGE=1 removes it too.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"

need_root

sock="unix://$STATE/docker.sock"

if dockerd_running; then
    pid=$(cat "$STATE/docker.pid")
    # Containers first, so dockerd's shutdown has nothing left to wait for.
    ids=$(timeout 20 docker -H "$sock" ps -aq 2>/dev/null || true)
    if [ -n "$ids" ]; then
        log "removing $(wc -w <<<"$ids") container(s)"
        # shellcheck disable=SC2086 # one id per word
        timeout 60 docker -H "$sock" rm -f $ids >/dev/null 2>&1 || true
    fi
    log "stopping dockerd (pid $pid)"
    stop_pid "$pid" 30
fi

# A dockerd that was SIGKILLed leaves its containerd and shims behind. They
# are identified by our own pidfile and socket path, never by name alone.
cpid_file=$EXEC_ROOT/containerd/containerd.pid
if [ -f "$cpid_file" ]; then
    cpid=$(cat "$cpid_file" 2>/dev/null || true)
    if [ -n "$cpid" ] && [ "$(cat "/proc/$cpid/comm" 2>/dev/null)" = containerd ]; then
        log "stopping orphaned containerd (pid $cpid)"
        stop_pid "$cpid" 10
    fi
fi
# Containers whose shim outlived dockerd: dockerd gives each runtime its own
# runc root under the exec-root (runtime-<name>/moby).
for root in "$EXEC_ROOT"/runtime-*/moby; do
    [ -d "$root" ] || continue
    for id in $(runc --root "$root" list -q 2>/dev/null || true); do
        log "deleting orphaned container $id ($root)"
        runc --root "$root" delete -f "$id" >/dev/null 2>&1 || true
    done
done
for dir in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$dir/cmdline") || continue
    case $cmd in
    *containerd-shim*"$EXEC_ROOT/containerd/containerd.sock"*)
        log "killing orphaned shim ${dir#/proc/}"
        kill -KILL "${dir#/proc/}" 2>/dev/null || true
        ;;
    esac
done

# Mounts left under our dirs (netns files, overlay layers) after a crash,
# deepest first.
# dockerd also bind-mounts the data-root onto itself to make it shared.
awk -v a="$STATE/" -v b="$DATA_ROOT/" -v r="$DATA_ROOT" \
    'index($5, a) == 1 || index($5, b) == 1 || $5 == r { print $5 }' /proc/self/mountinfo |
    sort -r | while read -r mnt; do
    umount -l "$mnt" 2>/dev/null || true
done

if ip link show "$BRIDGE" >/dev/null 2>&1; then
    log "removing bridge $BRIDGE"
    ip link del "$BRIDGE"
fi

# dockerd leaves its per-bridge iptables rules behind on shutdown; delete
# exactly the ones that name our bridge or subnet.
subnet_prefix=${BRIDGE_CIDR%.*}.
for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat; do
        rules=$("$cmd" -t "$table" -S 2>/dev/null |
            grep -F -e "$BRIDGE" -e "$subnet_prefix" | grep '^-A ' || true)
        [ -n "$rules" ] || continue
        while read -r rule; do
            # shellcheck disable=SC2086 # rule is iptables' own word list
            "$cmd" -t "$table" ${rule/#-A/-D} 2>/dev/null || true
        done <<<"$rules"
    done
done

rm -f "$STATE/docker.pid" "$STATE/docker.sock" "$STATE/env"
if [ "${VIBE_TEST_PURGE:-0}" = 1 ]; then
    log "purging $DATA_ROOT and $STATE"
    rm -rf "$DATA_ROOT" "$STATE"
fi
log "down"
