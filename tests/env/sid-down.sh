#!/usr/bin/env bash
# Stop everything tests/env/sid-up.sh started: containers, the sid dockerd,
# its containerd and shims, podman's leftovers, the bridges, and (unless it
# was started with --tree) the debootstrapped tree. Safe to call twice.
# Everything is found by our own pidfiles, sockets and paths, never by name.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"
# shellcheck source=tests/env/sid-common.sh
. "$REPO/tests/env/sid-common.sh"
[ -f "$SID_STATE/tree" ] && SID_TREE=$(cat "$SID_STATE/tree")

need_root

sock="unix://$SID_STATE/docker.sock"
if sid_running; then
    pid=$(cat "$SID_STATE/docker.pid")
    ids=$(timeout 20 docker -H "$sock" ps -aq 2>/dev/null || true)
    if [ -n "$ids" ]; then
        log "removing $(wc -w <<<"$ids") container(s)"
        # shellcheck disable=SC2086 # one id per word
        timeout 60 docker -H "$sock" rm -f $ids >/dev/null 2>&1 || true
    fi
    # podman's containers (storage under the state dir).
    if [ -x "$SID_STATE/bin/podman" ]; then
        timeout 60 "$SID_STATE/bin/podman" --root "$SID_STATE/podman/root" \
            --runroot "$SID_STATE/podman/run" rm -af >/dev/null 2>&1 || true
        timeout 30 "$SID_STATE/bin/podman" --root "$SID_STATE/podman/root" \
            --runroot "$SID_STATE/podman/run" network rm -f vibesid >/dev/null 2>&1 || true
    fi
    log "stopping the sid dockerd (pid $pid)"
    stop_pid "$pid" 30
fi

cpid_file=$SID_EXEC_ROOT/containerd/containerd.pid
if [ -f "$cpid_file" ]; then
    cpid=$(cat "$cpid_file" 2>/dev/null || true)
    if [ -n "$cpid" ] && [ "$(cat "/proc/$cpid/comm" 2>/dev/null)" = containerd ]; then
        log "stopping orphaned containerd (pid $cpid)"
        stop_pid "$cpid" 10
    fi
fi
# Shims, conmons and their containers that outlived the daemons: those that
# name our socket or state dir on their command line.
for dir in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$dir/cmdline") || continue
    case $cmd in
    *containerd-shim*"$SID_EXEC_ROOT/containerd/containerd.sock"* | *conmon*"$SID_STATE/podman/"*)
        log "killing orphaned ${cmd%% *} ${dir#/proc/}"
        kill -KILL "${dir#/proc/}" 2>/dev/null || true
        ;;
    esac
done

sid_forward_rules -D
for link in "$SID_BRIDGE" "$SID_PODMAN_BRIDGE"; do
    if ip link show "$link" >/dev/null 2>&1; then
        log "removing bridge $link"
        ip link del "$link"
    fi
done
# podman's netavark (nftables driver) keeps its rules in its own table.
if [ "$(cat "$SID_STATE/netavark-table-before" 2>/dev/null || echo 1)" = 0 ] &&
    nft list table inet netavark >/dev/null 2>&1; then
    log "removing nft table inet netavark (the tree's podman)"
    nft delete table inet netavark || true
fi

# The namespace dies with its last process; give the kernel a moment.
sleep 0.5
if [ "$(cat "$SID_STATE/tree-cached" 2>/dev/null || echo 0)" != 1 ]; then
    sid_remove_tree
    rmdir "$SID_DATA" 2>/dev/null || true
    # Nothing kept for a next run (CI caches nothing).
    rm -rf --one-file-system "$SID_STATE"
else
    rm -rf --one-file-system "$SID_STATE/exec" "$SID_STATE/podman"
    rm -f "$SID_STATE/docker.pid" "$SID_STATE/docker.sock" "$SID_STATE/env"
fi
log "sid stack down"
