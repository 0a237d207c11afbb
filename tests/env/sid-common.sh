# Shared settings for tests/env/sid-up.sh and sid-down.sh (sourced after
# common.sh). Everything differs from the host stack's: state dir, bridge,
# subnets, so the two daemons never meet.
# shellcheck shell=bash disable=SC2034

SID_STATE=${VIBE_TEST_SID_STATE:-/run/vibe-test-sid}
SID_EXEC_ROOT=$SID_STATE/exec
# Where CI's fresh tree lives (removed by sid-down.sh).
SID_DATA=${VIBE_TEST_SID_DATA:-/var/lib/vibe-test-sid}
SID_TREE=${SID_TREE:-$SID_DATA/tree}
SID_BRIDGE=${VIBE_TEST_SID_BRIDGE:-vibesid0}
SID_BRIDGE_CIDR=${VIBE_TEST_SID_BRIDGE_CIDR:-172.30.98.1/24}
SID_BRIDGE_CIDR6=${VIBE_TEST_SID_BRIDGE_CIDR6:-fd42:7669:6265:2::/64}
# podman's network in the tree: its own bridge and subnet too.
SID_PODMAN_BRIDGE=podsid0
SID_PODMAN_SUBNET=172.30.97.0/24
# What the suites need in the tree. busybox-static: the image's busybox
# comes from the host, but the tree keeps a shell toolbox; procps: `docker top`.
# docker-cli + docker-buildx: sid's docker.io ships no CLI; the tree's own
# CLI runs BuildKit builds (`docker buildx build`) inside the tree.
SID_PACKAGES=(
    docker.io containerd runc podman conmon netavark aardvark-dns
    procps iproute2 nftables busybox-static ca-certificates
    docker-cli docker-buildx
)

# True when the pidfile names a live dockerd.
sid_running() {
    local pid
    [ -f "$SID_STATE/docker.pid" ] || return 1
    pid=$(cat "$SID_STATE/docker.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -d "/proc/$pid" ] &&
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}

# Removes $SID_TREE, refusing while anything is mounted below it (a bind of
# a host directory must never be deleted through).
sid_remove_tree() {
    [ -e "$SID_TREE" ] || return 0
    case $SID_TREE in / | "") die "refusing to remove tree '$SID_TREE'" ;; esac
    if awk -v t="$SID_TREE" 'index($5, t) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        die "mounts remain under $SID_TREE; not removing it"
    fi
    log "removing $SID_TREE"
    rm -rf --one-file-system "$SID_TREE"
}

# podman in the tree: its default network on a bridge and subnet of its own
# (the host's podman owns podman0 / 10.88.0.0/16), nftables in its own table.
sid_podman_config() {
    local tree=$1
    mkdir -p "$tree/etc/containers/networks"
    cat >"$tree/etc/containers/containers.conf" <<EOF
[network]
default_network = "vibesid"
firewall_driver = "nftables"
EOF
    jq -n --arg br "$SID_PODMAN_BRIDGE" --arg net "$SID_PODMAN_SUBNET" \
        --arg gw "${SID_PODMAN_SUBNET%.0/24}.1" '{
            name: "vibesid",
            id: "7669626573696430000000000000000000000000000000000000000000000000",
            driver: "bridge",
            network_interface: $br,
            created: "2026-01-01T00:00:00Z",
            subnets: [{subnet: $net, gateway: $gw}],
            ipv6_enabled: false,
            internal: false,
            dns_enabled: false,
            ipam_options: {driver: "host-local"}
        }' >"$tree/etc/containers/networks/vibesid.json"
}

# The FORWARD accepts for our bridge: $1 is -I (add, once) or -D (delete).
sid_forward_rules() {
    local cmd dir
    for cmd in iptables ip6tables; do
        command -v "$cmd" >/dev/null || continue
        for dir in -i -o; do
            local rule=(FORWARD "$dir" "$SID_BRIDGE" -m comment --comment vibe-test-sid -j ACCEPT)
            if [ "$1" = -I ]; then
                "$cmd" -C "${rule[@]}" 2>/dev/null || "$cmd" -I "${rule[@]}"
            else
                while "$cmd" -D "${rule[@]}" 2>/dev/null; do :; done
            fi
        done
    done
}
