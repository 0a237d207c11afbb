#!/usr/bin/env bash
# A second, modern engine stack for the e2e suites: Debian sid's Docker 28,
# containerd 2, runc 1.3 and podman 5, run from a debootstrapped tree beside
# the host's (Debian 12) stack.
#
#   sudo tests/env/sid-up.sh [--tree DIR]   # then: VIBE_TEST_STATE=/run/vibe-test-sid
#   sudo tests/env/sid-down.sh
#
# Without --tree (CI), a fresh tree is debootstrapped under $SID_DATA and
# removed by sid-down.sh: nothing is cached between runs. --tree DIR (for
# development) builds the tree in DIR once and reuses it.
#
# dockerd runs in a private mount namespace after pivot_root into the tree,
# not in a chroot: under a chroot, runc's container mount namespaces keep the
# host's root and every exec would land in the host's /. The paths the tests
# share with the daemon (the repo and the shim binary, the policies' paths,
# /run/vibe-shim, /tmp, the state dir with the socket) are bound at the same
# paths inside. Own bridge, "iptables": false: it never touches the host
# dockerd's rules or its bridge.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"
# shellcheck source=tests/env/sid-common.sh
. "$REPO/tests/env/sid-common.sh"

need_root

# ---- inside the private mount namespace (run by this script, below) --------
if [ "${1:-}" = --inside ]; then
    T=$SID_TREE
    # Binds first go on the tree, so / is a mount point after pivot_root:
    # Docker 28 remounts / as a slave while it imports images.
    mount --rbind "$T" "$T"
    mount --make-rprivate "$T"
    mount -t proc proc "$T/proc"
    mount --rbind /sys "$T/sys"
    mount --make-rslave "$T/sys"
    mount --rbind /dev "$T/dev"
    mount --make-rslave "$T/dev"
    mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$T/run"
    mkdir -p "$T/run/lock"
    # The host's /etc, read-only: /etc/vibe-shim in the tree links there,
    # so ctr's runtime reads the config the tests install on the host.
    mkdir -p "$T/run/host-etc"
    mount --bind /etc "$T/run/host-etc"
    mount -o remount,bind,ro "$T/run/host-etc"
    for path in $SID_SHARED; do
        mkdir -p "$T$path"
        mount --rbind "$path" "$T$path"
    done
    cd "$T"
    mkdir -p .old-root
    pivot_root . .old-root
    cd /
    umount -l /.old-root
    rmdir /.old-root
    exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 \
        dockerd \
        --exec-root "$SID_EXEC_ROOT" \
        -H "unix://$SID_STATE/docker.sock" \
        --pidfile "$SID_STATE/docker.pid" \
        --config-file "$SID_STATE/daemon.json"
fi

# ---- 1. the tree ---------------------------------------------------------------
cached=0
if [ "${1:-}" = --tree ]; then
    [ -n "${2:-}" ] || die "--tree needs a directory"
    SID_TREE=$(readlink -m "$2")
    cached=1
fi
if sid_running; then
    die "the sid dockerd is already running (pid $(cat "$SID_STATE/docker.pid")); run sid-down.sh first"
fi
mkdir -p "$SID_STATE"
chmod 755 "$SID_STATE"
printf '%s\n' "$SID_TREE" >"$SID_STATE/tree"
printf '%s\n' "$cached" >"$SID_STATE/tree-cached"

# The host's own Debian mirror (deb822 or one-line sources).
mirror=$(sed -n 's/^URIs: *\([^ ]*debian\/*\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ { print $2; exit }' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}

if [ ! -f "$SID_TREE/.vibe-sid-ready" ]; then
    [ "$cached" = 1 ] || sid_remove_tree
    command -v debootstrap >/dev/null || die "debootstrap missing: apt-get install debootstrap"
    log "debootstrap --variant=minbase sid $SID_TREE $mirror"
    t0=$SECONDS
    debootstrap --variant=minbase sid "$SID_TREE" "$mirror" >"$SID_STATE/debootstrap.log" 2>&1 || {
        tail -n 30 "$SID_STATE/debootstrap.log" >&2
        die "debootstrap failed (log: $SID_STATE/debootstrap.log)"
    }
    log "debootstrap took $((SECONDS - t0))s"
    # sid's Release file can outlive its Valid-Until; only this tree ignores it.
    echo 'Acquire::Check-Valid-Until "false";' >"$SID_TREE/etc/apt/apt.conf.d/99vibe-test"
    # No service starts from package scripts.
    printf '#!/bin/sh\nexit 101\n' >"$SID_TREE/usr/sbin/policy-rc.d"
    chmod 755 "$SID_TREE/usr/sbin/policy-rc.d"
fi
# Every SID_PACKAGES entry not yet installed: all of them in a fresh tree;
# in a reused one (--tree), those added to the list since it was made.
missing=()
for pkg in "${SID_PACKAGES[@]}"; do
    chroot "$SID_TREE" dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null |
        grep -q ' installed$' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    t0=$SECONDS
    log "installing ${missing[*]} in the tree"
    unshare -m --propagation private -- sh -c '
        mount -t proc proc "$1/proc" && shift &&
        chroot "$0" apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive chroot "$0" apt-get install -y -q \
            --no-install-recommends "$@"' \
        "$SID_TREE" "$SID_TREE" "${missing[@]}" >"$SID_STATE/apt.log" 2>&1 || {
        tail -n 30 "$SID_STATE/apt.log" >&2
        die "apt-get install in the tree failed (log: $SID_STATE/apt.log)"
    }
    log "package install took $((SECONDS - t0))s"
fi
touch "$SID_TREE/.vibe-sid-ready"

# Per-run files in the tree.
cp /etc/resolv.conf "$SID_TREE/etc/resolv.conf"
ln -sfn /run/host-etc/vibe-shim "$SID_TREE/etc/vibe-shim"
sid_podman_config "$SID_TREE"
# The tree's podman (netavark, nftables driver) creates `inet netavark` in
# the host's namespace if absent; sid-down.sh removes it only then.
if nft list table inet netavark >/dev/null 2>&1; then
    echo 1 >"$SID_STATE/netavark-table-before"
else
    echo 0 >"$SID_STATE/netavark-table-before"
fi

# ---- 2. bridge, daemon.json ------------------------------------------------------
mkdir -p "$SID_EXEC_ROOT" "$WORKTREES" "$AUDIT_DIR" && mkdir -p -m 0700 /run/vibe-shim
if ! ip link show "$SID_BRIDGE" >/dev/null 2>&1; then
    log "creating bridge $SID_BRIDGE ($SID_BRIDGE_CIDR)"
    ip link add "$SID_BRIDGE" type bridge
fi
if ! ip -4 addr show dev "$SID_BRIDGE" | grep -q "inet ${SID_BRIDGE_CIDR%/*}/"; then
    ip addr add "$SID_BRIDGE_CIDR" dev "$SID_BRIDGE"
fi
ip link set "$SID_BRIDGE" up
# With "iptables": false the sid dockerd adds no forwarding rules, and the
# host dockerd (when running) sets FORWARD's policy to DROP: accept what
# crosses our bridge, in rules that name it (sid-down.sh deletes them).
sid_forward_rules -I

# The agent suite's policy: the shipped one plus the worktree drop-in
# (not for a policy dir of its own, such as quickstart's).
AGENT_CONFIG= AGENT_DIR=
[ -n "${VIBE_TEST_POLICY_DIR:-}" ] || assemble_agent_policy "$SID_STATE" vibe-test-sid
runtimes=$(runtimes_json)
jq -n \
    --argjson runtimes "$runtimes" \
    --arg bridge "$SID_BRIDGE" \
    --arg v6 "$SID_BRIDGE_CIDR6" \
    '{
        runtimes: $runtimes,
        bridge: $bridge,
        iptables: false,
        ip6tables: false,
        ipv6: true,
        "fixed-cidr-v6": $v6,
        "cgroup-parent": "vibe-test-sid",
        "log-driver": "json-file",
        "storage-driver": "overlay2"
    }' >"$SID_STATE/daemon.json"

# ---- 3. the daemon -------------------------------------------------------------
rm -f "$SID_STATE/docker.pid" "$SID_STATE/docker.sock"
# Every path the tests and the daemon must both see, at the same path.
shared="/tmp /var/tmp/vibe-test $AUDIT_DIR /run/vibe-shim $SID_STATE $REPO"
shim_dir=$(dirname "$(readlink -f "$SHIM_BIN")")
case $shim_dir/ in "$REPO"/*) ;; *) shared="$shared $shim_dir" ;; esac
policy_dir=$(readlink -f "$POLICY_DIR")
case $policy_dir/ in "$REPO"/*) ;; *) shared="$shared $policy_dir" ;; esac
log "starting the sid dockerd (log: $SID_STATE/dockerd.log)"
SID_TREE=$SID_TREE SID_SHARED=$shared setsid unshare -m --propagation private -- \
    bash "$REPO/tests/env/sid-up.sh" --inside \
    </dev/null >"$SID_STATE/dockerd.log" 2>&1 &

deadline=$((SECONDS + 90))
until docker -H "unix://$SID_STATE/docker.sock" info >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
        tail -n 30 "$SID_STATE/dockerd.log" >&2 || true
        die "the sid dockerd did not answer on $SID_STATE/docker.sock within 90s"
    fi
    sleep 0.5
done
export DOCKER_HOST="unix://$SID_STATE/docker.sock"

info_runtimes=$(docker info --format '{{json .Runtimes}}')
for name in $(jq -r 'keys[]' <<<"$runtimes"); do
    jq -e --arg n "$name" 'has($n)' <<<"$info_runtimes" >/dev/null ||
        die "runtime $name missing from the sid docker info (see $SID_STATE/dockerd.log)"
done

# Commands run inside the daemon's mount namespace (the tree's ctr, runc,
# podman, containerd), for the tests and for this log.
mkdir -p "$SID_STATE/bin"
cat >"$SID_STATE/bin/in-tree" <<EOF
#!/bin/sh
# Runs a command in the sid tree (the sid dockerd's mount namespace).
exec nsenter -t "\$(cat '$SID_STATE/docker.pid')" -m -- "\$@"
EOF
for tool in ctr runc podman containerd docker; do
    printf '#!/bin/sh\nexec %s %s "$@"\n' "$SID_STATE/bin/in-tree" "$tool" >"$SID_STATE/bin/$tool"
done
chmod 755 "$SID_STATE"/bin/*

build_busybox_rootfs "$SID_STATE/busybox-rootfs" "$SID_STATE/busybox-rootfs.tar"
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "importing $IMAGE"
    docker import "$SID_STATE/busybox-rootfs.tar" "$IMAGE" >/dev/null
fi

containerd_sock="$SID_EXEC_ROOT/containerd/containerd.sock"
[ -S "$containerd_sock" ] || die "managed containerd socket $containerd_sock not found"

# The tree's path on its filesystem: mountinfo shows the daemon's files
# under it (tests map it back to the engine's paths).
mount_root=$("$SID_STATE/bin/in-tree" awk '$5 == "/" { print $4; exit }' /proc/self/mountinfo)

cat >"$SID_STATE/env.tmp" <<EOF
DOCKER_HOST=unix://$SID_STATE/docker.sock
CONTAINERD_ADDRESS=$containerd_sock
VIBE_SHIM_BIN=$SHIM_BIN
REPO=$REPO
STATE=$SID_STATE
VIBE_TEST_STACK=sid
VIBE_TEST_DOCKER_IPTABLES=false
VIBE_TEST_IMAGE=$IMAGE
VIBE_TEST_BRIDGE=$SID_BRIDGE
VIBE_TEST_GATEWAY=${SID_BRIDGE_CIDR%/*}
VIBE_TEST_GATEWAY6=${SID_BRIDGE_CIDR6%::/64}::1
VIBE_TEST_WORKTREES=$WORKTREES
VIBE_TEST_AGENT_CONFIG=$AGENT_CONFIG
VIBE_TEST_AGENT_DIR=$AGENT_DIR
VIBE_TEST_AUDIT=$AUDIT_DIR/audit.jsonl
VIBE_TEST_ROOTFS=$SID_STATE/busybox-rootfs
VIBE_TEST_ROOTFS_TAR=$SID_STATE/busybox-rootfs.tar
VIBE_TEST_MOUNT_ROOT=$mount_root
VIBE_TEST_IN_TREE=$SID_STATE/bin/in-tree
VIBE_TEST_CTR=$SID_STATE/bin/ctr
VIBE_TEST_RUNC=$SID_STATE/bin/runc
VIBE_TEST_PODMAN=$SID_STATE/bin/podman
VIBE_TEST_DOCKER=$SID_STATE/bin/docker
VIBE_TEST_SID_TREE=$SID_TREE
EOF
mv "$SID_STATE/env.tmp" "$SID_STATE/env"

# ---- 4. versions, for the CI log ------------------------------------------------
echo "== sid stack versions"
echo "docker (server): $(docker version --format '{{.Server.Version}}')"
echo "docker (client): $(docker version --format '{{.Client.Version}}')"
echo "containerd: $("$SID_STATE/bin/containerd" --version)"
"$SID_STATE/bin/runc" --version | sed 's/^/runc: /'
echo "podman: $("$SID_STATE/bin/podman" --version)"
echo "kernel: $(uname -r), cgroup: $(stat -f -c %T /sys/fs/cgroup)"

log "ready: VIBE_TEST_STATE=$SID_STATE (env in $SID_STATE/env)"
