#!/usr/bin/env bash
# Start the private test dockerd that the e2e suites run against.
#
#   sudo tests/env/up.sh        # idempotent: re-running reloads the runtimes
#   sudo tests/env/down.sh      # stops everything this started
#
# The daemon has its own data-root, exec-root, socket, pidfile and bridge, so
# it can run next to a system (or dev) dockerd without fighting over docker0.
# One runtime is registered per tests/policies/<name>.toml (or
# $VIBE_TEST_POLICY_DIR/<name>.toml) as
# `vibe-shim-<name>`, plus `vibe-shim` for default.toml. The tests read
# $STATE/env for the socket paths.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"

need_root

mkdir -p "$STATE" "$EXEC_ROOT" "$DATA_ROOT" "$WORKTREES" "$AUDIT_DIR"
chmod 755 "$STATE"

# The bridge is ours, not Docker's: with "bridge" set, dockerd uses this
# existing device and its address as the gateway.
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    log "creating bridge $BRIDGE ($BRIDGE_CIDR)"
    ip link add "$BRIDGE" type bridge
fi
if ! ip -4 addr show dev "$BRIDGE" | grep -q "inet ${BRIDGE_CIDR%/*}/"; then
    ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
fi
ip link set "$BRIDGE" up

# The agent suite's policy: the shipped one plus the worktree drop-in
# (not for a policy dir of its own, such as quickstart's).
AGENT_CONFIG= AGENT_DIR=
[ -n "${VIBE_TEST_POLICY_DIR:-}" ] || assemble_agent_policy "$STATE" "" "$DATA_ROOT/volumes"

# daemon.json: one runtime per policy file; written only when it changes
# so a re-run can tell whether to reload.
runtimes=$(runtimes_json)
new_json=$(jq -n \
    --argjson runtimes "$runtimes" \
    --arg bridge "$BRIDGE" \
    --arg v6 "$BRIDGE_CIDR6" \
    '{
        runtimes: $runtimes,
        bridge: $bridge,
        ipv6: true,
        "fixed-cidr-v6": $v6,
        "log-driver": "json-file",
        "storage-driver": "overlay2"
    }')
changed=0
if [ ! -f "$STATE/daemon.json" ] || [ "$(cat "$STATE/daemon.json")" != "$new_json" ]; then
    printf '%s\n' "$new_json" >"$STATE/daemon.json.tmp"
    mv "$STATE/daemon.json.tmp" "$STATE/daemon.json"
    changed=1
fi

if dockerd_running; then
    if [ "$changed" = 1 ]; then
        # Runtimes are reloadable; bridge/ipv6 never change between runs.
        log "dockerd already running (pid $(cat "$STATE/docker.pid")); reloading runtimes"
        kill -HUP "$(cat "$STATE/docker.pid")"
        sleep 1
    else
        log "dockerd already running (pid $(cat "$STATE/docker.pid"))"
    fi
else
    rm -f "$STATE/docker.pid" "$STATE/docker.sock"
    log "starting dockerd (log: $STATE/dockerd.log)"
    # setsid: the daemon must outlive this script and not get the
    # terminal's signals; stdin from /dev/null because CI has none.
    setsid dockerd \
        --data-root "$DATA_ROOT" \
        --exec-root "$EXEC_ROOT" \
        -H "unix://$STATE/docker.sock" \
        --pidfile "$STATE/docker.pid" \
        --config-file "$STATE/daemon.json" \
        </dev/null >"$STATE/dockerd.log" 2>&1 &
fi

# Bounded wait for the API. A daemon that died shows its log's tail.
deadline=$((SECONDS + 60))
until docker -H "unix://$STATE/docker.sock" info >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
        tail -n 30 "$STATE/dockerd.log" >&2 || true
        die "dockerd did not answer on $STATE/docker.sock within 60s"
    fi
    sleep 0.5
done
export DOCKER_HOST="unix://$STATE/docker.sock"

# Every registered runtime must be visible (catches a reload that failed).
info_runtimes=$(docker info --format '{{json .Runtimes}}')
for name in $(jq -r 'keys[]' <<<"$runtimes"); do
    jq -e --arg n "$name" 'has($n)' <<<"$info_runtimes" >/dev/null ||
        die "runtime $name missing from docker info (see $STATE/dockerd.log)"
done

# The busybox image: /bin/busybox plus one symlink per applet, nothing else,
# no PATH in the image config (Docker supplies it). Rebuilt only if missing.
# The same rootfs dir and tarball serve ctr (--rootfs) and podman (import).
build_busybox_rootfs "$ROOTFS" "$STATE/busybox-rootfs.tar"
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "importing $IMAGE"
    docker import "$STATE/busybox-rootfs.tar" "$IMAGE" >/dev/null
fi

# dockerd 20.10 runs its own containerd under the exec-root.
containerd_sock="$EXEC_ROOT/containerd/containerd.sock"
[ -S "$containerd_sock" ] || die "managed containerd socket $containerd_sock not found"

cat >"$STATE/env.tmp" <<EOF
DOCKER_HOST=unix://$STATE/docker.sock
CONTAINERD_ADDRESS=$containerd_sock
VIBE_SHIM_BIN=$SHIM_BIN
REPO=$REPO
STATE=$STATE
VIBE_TEST_IMAGE=$IMAGE
VIBE_TEST_BRIDGE=$BRIDGE
VIBE_TEST_GATEWAY=${BRIDGE_CIDR%/*}
VIBE_TEST_GATEWAY6=${BRIDGE_GW6}
VIBE_TEST_WORKTREES=$WORKTREES
VIBE_TEST_AGENT_CONFIG=$AGENT_CONFIG
VIBE_TEST_AGENT_DIR=$AGENT_DIR
VIBE_TEST_AUDIT=$AUDIT_DIR/audit.jsonl
VIBE_TEST_ROOTFS=$ROOTFS
VIBE_TEST_ROOTFS_TAR=$STATE/busybox-rootfs.tar
EOF
mv "$STATE/env.tmp" "$STATE/env"

log "ready: DOCKER_HOST=unix://$STATE/docker.sock (env in $STATE/env)"
