# Shared settings for tests/env/up.sh and down.sh (sourced, not run).
# Every path can be overridden from the environment; the defaults are chosen
# not to clash with a system dockerd (/var/lib/docker, docker0, 172.17/16).
# shellcheck shell=bash disable=SC2034

STATE=${VIBE_TEST_STATE:-/run/vibe-test}
DATA_ROOT=${VIBE_TEST_DATA_ROOT:-/var/lib/vibe-test}
EXEC_ROOT=$STATE/exec
ROOTFS=$STATE/busybox-rootfs
BRIDGE=${VIBE_TEST_BRIDGE:-vibetest0}
BRIDGE_CIDR=${VIBE_TEST_BRIDGE_CIDR:-172.30.99.1/24}
# A ULA /64 of our own (the VM's eth0 already uses fd00::/64).
BRIDGE_CIDR6=${VIBE_TEST_BRIDGE_CIDR6:-fd42:7669:6265:1::/64}
BRIDGE_GW6=${BRIDGE_CIDR6%::/64}::1
# Paths the test policies (tests/policies/*.toml) name literally.
WORKTREES=/var/tmp/vibe-test/worktrees
AUDIT_DIR=/var/log/vibe-test
IMAGE=vibe-busybox:latest
POLICY_DIR=${VIBE_TEST_POLICY_DIR:-$REPO/tests/policies}
SHIM_BIN=${VIBE_SHIM_BIN:-$REPO/target/release/vibe-shim}

log() { printf '[vibe-test] %s\n' "$*" >&2; }
die() {
    printf '[vibe-test] error: %s\n' "$*" >&2
    exit 1
}
need_root() { [ "$(id -u)" = 0 ] || die "run as root (sudo $0)"; }

# True when the pidfile names a live dockerd.
dockerd_running() {
    local pid
    [ -f "$STATE/docker.pid" ] || return 1
    pid=$(cat "$STATE/docker.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -d "/proc/$pid" ] &&
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}

# The busybox image's rootfs and tarball (/bin/busybox plus one symlink per applet,
# nothing else); rebuilt only if missing. up.sh and sid-up.sh use it.
build_busybox_rootfs() {
    local rootfs=$1 tar=$2 applet
    [ -f "$tar" ] && [ -x "$rootfs/bin/busybox" ] && return 0
    [ -x /bin/busybox ] || die "/bin/busybox missing: apt-get install busybox-static"
    rm -rf "$rootfs"
    mkdir -p "$rootfs"
    chmod 755 "$rootfs"
    (cd "$rootfs" && mkdir -p -m 755 bin etc proc sys dev run root && mkdir -p -m 1777 tmp)
    cp /bin/busybox "$rootfs/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] && continue
        ln -sf busybox "$rootfs/bin/$applet"
    done
    tar --numeric-owner -C "$rootfs" -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
}

# Copies each host binary ($2...) and the shared libraries ldd lists for it
# into rootfs $1, at the same paths: an image with the host's git or curl on
# the busybox rootfs (e2e_credentials' vibe-tls, quickstart.sh's vibe-git).
add_host_binaries() {
    local rootfs=$1 bin lib
    shift
    for bin in "$@"; do
        mkdir -p "$rootfs$(dirname "$bin")"
        cp -L "$bin" "$rootfs$bin"
        for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
            mkdir -p "$rootfs$(dirname "$lib")"
            [ -e "$rootfs$lib" ] || cp -L "$lib" "$rootfs$lib"
        done
    done
}

# Wait up to $2 seconds for pid $1 to exit, then SIGKILL it.
stop_pid() {
    local pid=$1 grace=$2 i
    [ -d "/proc/$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < grace * 10; i++)); do
        [ -d "/proc/$pid" ] || return 0
        sleep 0.1
    done
    log "pid $pid ignored SIGTERM for ${grace}s; killing"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
}

# daemon.json's "runtimes" (JSON, built with jq so paths are quoted):
# vibe-shim-<stem> per tests/policies/<stem>.toml, and vibe-shim for
# default. The runtime names the real file (quickstart links default.toml
# to /etc/vibe-shim/config.toml). up.sh and sid-up.sh both use it.
runtimes_json() {
    local runtimes='{}' link stem policy entry
    for link in "$POLICY_DIR"/*.toml; do
        [ -e "$link" ] || continue
        stem=$(basename "$link" .toml)
        policy=$(readlink -f "$link")
        entry=$(jq -n --arg path "$SHIM_BIN" --arg cfg "$policy" \
            '{path: $path, runtimeArgs: ["--config", $cfg]}')
        runtimes=$(jq --arg name "vibe-shim-$stem" --argjson e "$entry" '. + {($name): $e}' <<<"$runtimes")
        if [ "$stem" = default ]; then
            runtimes=$(jq --argjson e "$entry" '. + {"vibe-shim": $e}' <<<"$runtimes")
        fi
    done
    # The agent suite's assembled policy (assemble_agent_policy), when there.
    if [ -n "${AGENT_CONFIG:-}" ] && [ -f "$AGENT_CONFIG" ]; then
        entry=$(jq -n --arg path "$SHIM_BIN" --arg cfg "$AGENT_CONFIG" \
            '{path: $path, runtimeArgs: ["--config", $cfg]}')
        runtimes=$(jq --argjson e "$entry" '. + {"vibe-shim-agent": $e}' <<<"$runtimes")
    fi
    printf '%s\n' "$runtimes"
}

# The agent suite's policy (tests/tests/e2e_agent.rs), runtime
# vibe-shim-agent: the shipped packaging/config.toml (and the build.toml its
# profile names), the shipped config.d/10-worktrees.toml with its source
# pointed at <dir>/worktrees, and one drop-in with only what the harness
# must add: the test host's names, this stack's egress socket (the suite
# starts that daemon), the test audit log, the test dockerd's volume
# directory (its data-root is not /var/lib/docker), and on the sid stack its
# dockerd's cgroup parent. One directory per stack ($1: its state dir),
# under /var/tmp/vibe-test, which the sid tree shares. Sets AGENT_DIR and
# AGENT_CONFIG.
AGENT_HOSTS='"pypi.agent.vibe-test", "npm.agent.vibe-test"'
assemble_agent_policy() {
    local state=$1 cgroup_parent=${2:-} volume_dir=${3:-} wt
    AGENT_DIR=/var/tmp/vibe-test/agent/$(printf '%s' "$state" | tr / _)
    AGENT_CONFIG=$AGENT_DIR/config.toml
    install -d -m 0755 -o root -g root /var/tmp/vibe-test/agent "$AGENT_DIR" \
        "$AGENT_DIR/config.d" "$AGENT_DIR/worktrees"
    install -d -m 0700 -o root -g root "$AGENT_DIR/egress"
    install -m 0644 -o root -g root "$REPO/packaging/config.toml" "$AGENT_DIR/config.toml.tmp"
    install -m 0644 -o root -g root "$REPO/packaging/build.toml" "$AGENT_DIR/build.toml"
    wt=$(sed "s|^source = \"/srv/worktrees\"\$|source = \"$AGENT_DIR/worktrees\"|" \
        "$REPO/packaging/config.d/10-worktrees.toml")
    grep -qx "source = \"$AGENT_DIR/worktrees\"" <<<"$wt" ||
        die "packaging/config.d/10-worktrees.toml has no 'source = \"/srv/worktrees\"' line to point at the test worktrees"
    printf '%s\n' "$wt" >"$AGENT_DIR/config.d/10-worktrees.toml"
    {
        echo "# Written by tests/env/common.sh (assemble_agent_policy): what the"
        echo "# harness must add to the shipped policy, nothing that loosens it."
        echo "[network]"
        echo "hosts = [$AGENT_HOSTS]"
        echo 'egress_socket = "egress/egress.sock"'
        echo "[audit]"
        echo "path = \"$AUDIT_DIR/audit.jsonl\""
        if [ -n "$volume_dir" ]; then
            echo "[filesystem]"
            echo "volume_dirs = [\"$volume_dir\"]"
        fi
        if [ -n "$cgroup_parent" ]; then
            echo "[resources]"
            echo "cgroup_parents = [\"$cgroup_parent\"]"
        fi
    } >"$AGENT_DIR/config.d/90-vibe-test.toml"
    chmod 0644 "$AGENT_DIR/config.d"/*.toml
    mv "$AGENT_DIR/config.toml.tmp" "$AGENT_CONFIG"
}
