#!/usr/bin/env bash
# vibe-shim quickstart, on a fresh Debian or Ubuntu machine:
#
#   sudo packaging/quickstart.sh          # install, register, run a hostile container,
#                                         # then an agent at work in a git worktree
#   sudo packaging/quickstart.sh --stop   # undo what steps 4 and 8 added: the egress
#                                         # daemon, the private dockerd, the drop-ins,
#                                         # the test host, the demo worktree
#
# 1. installs the build and runtime dependencies (apt; rustup if no cargo)
# 2. builds vibe-shim in release mode
# 3. installs /usr/local/bin/vibe-shim and, unless one exists,
#    /etc/vibe-shim/config.toml (the commented default policy). If the
#    vibe-shim Debian package is installed, steps 2 and 3 use its
#    /usr/bin/vibe-shim instead, and leave its files alone.
# 4. starts the egress daemon the policy's mode "proxy" needs (unless one
#    answers already): a transient systemd unit, vibe-shim-egress-quickstart,
#    or without systemd a background process (pid in $EGRESS_PID); both last
#    until --stop or a reboot. The package's vibe-shim-egress.service is the
#    production one.
# 5. registers the `vibe-shim` runtime with a Docker daemon:
#    - the system's, if one answers on /var/run/docker.sock: adds a "runtimes"
#      entry to /etc/docker/daemon.json (backup kept) and reloads dockerd with
#      SIGHUP, which keeps running containers;
#    - otherwise a private dockerd (socket /run/vibe-quickstart/docker.sock,
#      bridge vibeqs0), left running for you to try; --stop ends it.
#    VIBE_QUICKSTART_DAEMON=private uses a private one even if a system
#    daemon runs; =system refuses to start a private one.
# 6. imports a busybox-only image (vibe-busybox:latest) with `docker import`
# 7. runs a hostile container and shows from inside what was enforced, and
#    a refused host through the proxy, with its log line
# 8. an agent at work, under the shipped policy plus the worktree drop-in:
#    - installs config.d/10-worktrees.toml (marked as the quick start's,
#      unless one exists) with its root $WORKTREES, owned by the host user
#      (SUDO_USER's uid, else 1000), and config.d/90-quickstart.toml, which
#      adds the test host's name to [network] hosts (and sets [process]
#      user to the host user's ids when they are not the policy's);
#    - starts a test host: namespace $PKG_NS behind veth $PKG_VETH on
#      198.51.100.244/30, serving one package file with busybox httpd on
#      $PKG_IP (one hop away, as the internet is), named $PKG_HOST in a
#      marked block of /etc/hosts;
#    - builds vibe-git:latest (the busybox rootfs plus the host's git and
#      curl with their libraries) and runs it: git init and commit in
#      $WORKTREES/quickstart-demo, and the package fetched through the proxy
#      (its egress log line shown), as the host user.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

BIN=/usr/local/bin/vibe-shim
CONFIG=/etc/vibe-shim/config.toml
SYSTEM_SOCK=${VIBE_QUICKSTART_SYSTEM_SOCK:-/var/run/docker.sock}
DAEMON_JSON=${VIBE_QUICKSTART_DAEMON_JSON:-/etc/docker/daemon.json}
DAEMON_PID=${VIBE_QUICKSTART_DAEMON_PID:-/var/run/docker.pid}
MODE=${VIBE_QUICKSTART_DAEMON:-auto}
IMAGE=vibe-busybox:latest
EGRESS_UNIT=vibe-shim-egress-quickstart
EGRESS_PID=/run/vibe-shim-egress-quickstart.pid
EGRESS_LOG=/var/log/vibe-shim/egress.jsonl
PACKAGED=0
if dpkg-query -W -f='${Status}' vibe-shim 2>/dev/null | grep -q 'install ok installed'; then
    PACKAGED=1
    BIN=/usr/bin/vibe-shim
fi

# The private daemon reuses the test env scripts with its own names, so it
# never collides with the test dockerd or a system one.
export VIBE_TEST_STATE=/run/vibe-quickstart
export VIBE_TEST_DATA_ROOT=/var/lib/vibe-quickstart
export VIBE_TEST_BRIDGE=vibeqs0
export VIBE_TEST_BRIDGE_CIDR=172.30.98.1/24
export VIBE_TEST_BRIDGE_CIDR6=fd42:7669:6265:2::/64
export VIBE_TEST_POLICY_DIR=$VIBE_TEST_STATE/policies
export VIBE_SHIM_BIN=$BIN
# The shared helpers (build_busybox_rootfs, add_host_binaries); the
# functions below replace its log/die.
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"

CONFIG_D=$(dirname "$CONFIG")/config.d
WORKTREES_DROPIN=$CONFIG_D/10-worktrees.toml
QS_DROPIN=$CONFIG_D/90-quickstart.toml
QS_MARK="# Installed by vibe-shim's packaging/quickstart.sh; quickstart.sh --stop removes it."
QS_STATE=/var/lib/vibe-shim-quickstart
WORKTREES=/srv/worktrees
DEMO=quickstart-demo
GIT_IMAGE=vibe-git:latest
PKG_NS=vibeqs-pkg
PKG_VETH=vibeqspkg0
PKG_LINK_HOST=198.51.100.245
PKG_LINK_NS=198.51.100.246
PKG_IP=203.0.113.246
PKG_HOST=packages.quickstart.test
PKG_FILE=hello-agent-1.0.tar.gz
HOSTS_BEGIN="# vibe-shim quickstart begin"
HOSTS_END="# vibe-shim quickstart end"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() {
    printf '$ %s\n' "$*" >&2
    "$@"
}
die() {
    printf 'quickstart: %s\n' "$*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "run as root: sudo $0"

# Whether pid $1 runs $BIN (also after a reinstall replaced the file, which
# the kernel then names "$BIN (deleted)").
runs_our_bin() {
    local exe
    exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
    [ "${exe% (deleted)}" = "$BIN" ]
}

# Stops the egress daemon this script started, if any; never the package's.
stop_egress() {
    if command -v systemctl >/dev/null && systemctl is-active --quiet "$EGRESS_UNIT" 2>/dev/null; then
        run systemctl stop "$EGRESS_UNIT"
    fi
    if [ -f "$EGRESS_PID" ]; then
        local pid
        pid=$(cat "$EGRESS_PID")
        if runs_our_bin "$pid"; then
            run kill "$pid"
            for _ in $(seq 1 50); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
        fi
        rm -f "$EGRESS_PID"
    fi
}

# Is a daemon of this script's, or the package's unit, running?
egress_running() {
    if [ -f "$EGRESS_PID" ] && runs_our_bin "$(cat "$EGRESS_PID")"; then
        return 0
    fi
    command -v systemctl >/dev/null &&
        { systemctl is-active --quiet vibe-shim-egress 2>/dev/null ||
            systemctl is-active --quiet "$EGRESS_UNIT" 2>/dev/null; }
}

# The host user the demo acts as: SUDO_USER's ids, else 1000:1000.
host_user_ids() {
    if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ] && id -u "$SUDO_USER" >/dev/null 2>&1; then
        echo "$(id -u "$SUDO_USER"):$(id -g "$SUDO_USER")"
    else
        echo 1000:1000
    fi
}

# /etc/hosts without our marked block, in place (it may be a bind mount).
hosts_unmark() {
    local kept
    kept=$(awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" \
        '$0 == b {skip = 1; next} $0 == e {skip = 0; next} !skip' /etc/hosts)
    printf '%s\n' "$kept" >/etc/hosts
}

# Undoes step 8: the test host, the drop-ins it installed, the demo
# worktree (and the root, if it made it and it is empty), the image.
stop_agent_demo() {
    if [ -f "$QS_STATE/httpd.pid" ]; then
        kill "$(cat "$QS_STATE/httpd.pid")" 2>/dev/null || true
    fi
    if ip netns list 2>/dev/null | grep -qw "$PKG_NS"; then
        for pid in $(ip netns pids "$PKG_NS" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
        run ip netns del "$PKG_NS"
    fi
    ip link del "$PKG_VETH" 2>/dev/null || true
    if grep -qxF "$HOSTS_BEGIN" /etc/hosts; then
        hosts_unmark
        echo "removed the quick start's block from /etc/hosts"
    fi
    [ ! -e "$QS_DROPIN" ] || run rm -f "$QS_DROPIN"
    if [ -f "$WORKTREES_DROPIN" ] && grep -qxF "$QS_MARK" "$WORKTREES_DROPIN"; then
        run rm -f "$WORKTREES_DROPIN"
    fi
    if [ -f "$QS_STATE/made-config-d" ]; then
        rmdir "$CONFIG_D" 2>/dev/null || true
    fi
    # The root step 8 used (the admin's drop-in may name another).
    [ ! -f "$QS_STATE/worktree-root" ] || WORKTREES=$(cat "$QS_STATE/worktree-root")
    [ ! -e "$WORKTREES/$DEMO" ] || run rm -rf "${WORKTREES:?}/$DEMO"
    if [ -f "$QS_STATE/made-worktrees" ]; then
        rmdir "$WORKTREES" 2>/dev/null || echo "keeping $WORKTREES: not empty"
    fi
    if [ -n "${DOCKER_HOST:-}" ] && docker image inspect "$GIT_IMAGE" >/dev/null 2>&1; then
        run docker image rm "$GIT_IMAGE" >/dev/null
    fi
    rm -rf "$QS_STATE"
}

if [ "${1:-}" = --stop ]; then
    # The image lives in whichever daemon the quick start used.
    if [ -S "$VIBE_TEST_STATE/docker.sock" ]; then
        export DOCKER_HOST=unix://$VIBE_TEST_STATE/docker.sock
    elif [ -S "$SYSTEM_SOCK" ]; then
        export DOCKER_HOST=unix://$SYSTEM_SOCK
    fi
    stop_agent_demo
    stop_egress
    bash tests/env/down.sh
    exit 0
fi

# ---- 1. dependencies ----------------------------------------------------------
say "1/8 dependencies"
PACKAGES=(docker.io runc busybox-static nftables tini libseccomp-dev pkg-config
    build-essential iproute2 iptables jq ca-certificates curl git)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
        missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    echo "all present: ${PACKAGES[*]}"
fi
for dir in "$HOME/.cargo/bin" /root/.cargo/bin; do
    [ -x "$dir/cargo" ] && PATH=$dir:$PATH
done
if ! command -v cargo >/dev/null; then
    # Debian's packaged rustc is older than the workspace's rust-version.
    echo "installing a minimal Rust toolchain with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y -q --profile minimal
    PATH=$HOME/.cargo/bin:$PATH
fi

# ---- 2. build -------------------------------------------------------------------
if [ "$PACKAGED" = 1 ]; then
    say "2/8 build: skipped, the vibe-shim package is installed ($BIN)"
else
    say "2/8 build"
    TARGET=${CARGO_TARGET_DIR:-$REPO/target}
    run cargo build --release -p vibe-shim
fi

# ---- 3. install -----------------------------------------------------------------
if [ "$PACKAGED" = 1 ]; then
    say "3/8 install: skipped, the package owns $BIN and $CONFIG"
else
    say "3/8 install"
    run install -m 755 "$TARGET/release/vibe-shim" "$BIN"
    if [ -e "$CONFIG" ]; then
        echo "keeping your existing $CONFIG (the shipped default is packaging/config.toml)"
    else
        run install -D -m 644 packaging/config.toml "$CONFIG"
    fi
    # The build profile config.toml names (BuildKit RUN steps under lockdown).
    if [ ! -e "$(dirname "$CONFIG")/build.toml" ]; then
        run install -m 644 packaging/build.toml "$(dirname "$CONFIG")/build.toml"
    fi
fi
# Step 8 writes its drop-in anew; one an earlier run left is not judged here.
rm -f "$QS_DROPIN"
run "$BIN" policy check --config "$CONFIG"
echo "policy OK: $CONFIG"

# ---- 4. the egress daemon ---------------------------------------------------------
# The JSON document alone: after it come the lines of what drop-ins set.
policy_dump() { "$BIN" policy check --json --config "$CONFIG" | sed -n '/^{/,/^}/p'; }
policy_json=$(policy_dump)
net_mode=$(jq -r '.network.mode' <<<"$policy_json")
egress_sock=$(jq -r '.network.egress_socket' <<<"$policy_json")
if [ "$net_mode" != proxy ]; then
    say "4/8 egress daemon: not needed (network mode $net_mode)"
elif egress_running; then
    say "4/8 egress daemon: one runs already ($egress_sock)"
else
    say "4/8 egress daemon (network mode proxy)"
    stop_egress
    if [ "$PACKAGED" = 1 ] && [ -d /run/systemd/system ]; then
        run systemctl enable --now vibe-shim-egress
    elif [ -d /run/systemd/system ]; then
        run systemd-run --unit="$EGRESS_UNIT" --collect -p Restart=always \
            "$BIN" egress --config "$CONFIG"
    else
        mkdir -p "$(dirname "$EGRESS_LOG")"
        printf '$ %s &\n' "$BIN egress --config $CONFIG" >&2
        setsid "$BIN" egress --config "$CONFIG" </dev/null \
            >>/var/log/vibe-shim/egress-quickstart.log 2>&1 &
        echo $! >"$EGRESS_PID"
    fi
    for _ in $(seq 1 100); do [ -S "$egress_sock" ] && break; sleep 0.1; done
    [ -S "$egress_sock" ] ||
        die "the egress daemon did not listen on $egress_sock (log: /var/log/vibe-shim/egress-quickstart.log, or journalctl -u $EGRESS_UNIT)"
    echo "egress daemon listening on $egress_sock; connection log: $EGRESS_LOG"
fi

# ---- 4. register with a Docker daemon ------------------------------------------------
say "5/8 register vibe-shim with Docker"
system_up=0
if [ "$MODE" != private ] && [ -S "$SYSTEM_SOCK" ] &&
    timeout 10 docker -H "unix://$SYSTEM_SOCK" info >/dev/null 2>&1; then
    system_up=1
fi
if [ "$system_up" = 1 ]; then
    export DOCKER_HOST=unix://$SYSTEM_SOCK
    echo "a Docker daemon answers on $SYSTEM_SOCK: registering vibe-shim there"
    if docker info --format '{{json .Runtimes}}' | jq -e 'has("vibe-shim")' >/dev/null; then
        echo "runtime vibe-shim is already registered; leaving $DAEMON_JSON alone"
    else
        entry=$(jq -n --arg p "$BIN" --arg c "$CONFIG" '{path: $p, runtimeArgs: ["--config", $c]}')
        mkdir -p "$(dirname "$DAEMON_JSON")"
        if [ -s "$DAEMON_JSON" ]; then
            backup=$DAEMON_JSON.bak.$(date +%Y%m%d%H%M%S)
            run cp -p "$DAEMON_JSON" "$backup"
            jq --argjson e "$entry" '.runtimes["vibe-shim"] = $e' "$backup" >"$DAEMON_JSON.tmp" ||
                die "$DAEMON_JSON is not valid JSON; not touching it"
        else
            jq -n --argjson e "$entry" '{runtimes: {"vibe-shim": $e}}' >"$DAEMON_JSON.tmp"
        fi
        mv "$DAEMON_JSON.tmp" "$DAEMON_JSON"
        echo "added to $DAEMON_JSON:"
        jq '.runtimes["vibe-shim"]' "$DAEMON_JSON"
        # SIGHUP reloads "runtimes" without restarting dockerd or containers.
        if command -v systemctl >/dev/null && systemctl is-active --quiet docker 2>/dev/null; then
            run systemctl reload docker
        elif [ -f "$DAEMON_PID" ]; then
            run kill -HUP "$(cat "$DAEMON_PID")"
        else
            die "cannot find dockerd to reload ($DAEMON_PID missing): send it SIGHUP, then re-run"
        fi
        for _ in $(seq 1 20); do
            docker info --format '{{json .Runtimes}}' | jq -e 'has("vibe-shim")' >/dev/null && break
            sleep 0.5
        done
        docker info --format '{{json .Runtimes}}' | jq -e 'has("vibe-shim")' >/dev/null ||
            die "dockerd did not pick up the runtime (does it read $DAEMON_JSON? see its log)"
    fi
    if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
        say "6/8 import $IMAGE"
        scratch=$(mktemp -d)
        build_busybox_rootfs "$scratch/rootfs" "$scratch/busybox.tar"
        docker import "$scratch/busybox.tar" "$IMAGE" >/dev/null
        rm -rf "$scratch"
    else
        say "6/8 $IMAGE already present"
    fi
    stop_hint="vibe-shim stays registered in $DAEMON_JSON (runtime \"vibe-shim\")"
else
    [ "$MODE" != system ] || die "no Docker daemon answers on $SYSTEM_SOCK"
    echo "no system Docker daemon answers on $SYSTEM_SOCK: starting a private one"
    mkdir -p "$VIBE_TEST_POLICY_DIR"
    ln -sfn "$CONFIG" "$VIBE_TEST_POLICY_DIR/default.toml"
    say "6/8 private dockerd + $IMAGE"
    bash tests/env/up.sh
    export DOCKER_HOST=unix://$VIBE_TEST_STATE/docker.sock
    stop_hint="private dockerd left running: export DOCKER_HOST=$DOCKER_HOST to use it; stop it with: sudo $0 --stop"
fi

# ---- 7. a hostile container ------------------------------------------------------
say "7/8 a hostile container through vibe-shim"
echo "Everything a client can ask for at once, including the host's root filesystem:"
hostile=(--rm --runtime=vibe-shim --privileged --cap-add ALL -u 0
    -e GITHUB_TOKEN=x -e AWS_SECRET_ACCESS_KEY=y --pids-limit -1)
set +e
run docker run "${hostile[@]}" -v /:/host "$IMAGE" ls /host
rc=$?
set -e
if [ "$rc" = 0 ]; then
    die "the container with -v /:/host ran: vibe-shim did not refuse it"
fi
echo "=> refused (exit $rc): the bind of / is outside [[filesystem.bind]]; runc never ran."

echo
echo "The same flags without the bind run, confined. From inside the container:"
# shellcheck disable=SC2016 # expanded inside the container
inside='
echo "--- /proc/self/status"; grep -E "^(CapEff|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status
echo "--- id";  id
echo "--- env"; env | sort
echo "--- write to /"; if touch /pwned 2>&1; then echo "WROTE /pwned"; fi
echo "--- write to /tmp"; touch /tmp/ok && echo "ok: /tmp is writable"
echo "--- mountinfo for /, /tmp and HOME ($HOME)"
awk -v h="$HOME" "\$5 == \"/\" || \$5 == \"/tmp\" || \$5 == h" /proc/self/mountinfo
echo "--- pids.max"; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max
'
run docker run "${hostile[@]}" "$IMAGE" sh -c "$inside"

if [ "$net_mode" = proxy ]; then
    echo
    echo "The network: nothing but the egress proxy on the container's own loopback,"
    echo "which tunnels only to [network] hosts. A host not on the list:"
    # shellcheck disable=SC2016 # expanded inside the container
    ask='echo "HTTPS_PROXY=$HTTPS_PROXY"
printf "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n" |
    nc -w 5 127.0.0.1 3128 | grep -E "^HTTP/|vibe-shim"'
    run docker run --rm --runtime=vibe-shim "$IMAGE" sh -c "$ask"
    echo "--- its line in $EGRESS_LOG"
    grep '"example.com"' "$EGRESS_LOG" | tail -n 1
fi

# ---- 8. an agent at work ------------------------------------------------------------
agent_summary=
if [ "$net_mode" != proxy ]; then
    say "8/8 an agent at work: skipped (network mode $net_mode; the demo fetches through the proxy)"
else
    say "8/8 an agent at work: a git worktree, and a package through the proxy"
    ids=$(host_user_ids)
    mkdir -p "$QS_STATE"
    # The worktree drop-in (docs/admin/policy.md), marked as ours.
    if [ -e "$WORKTREES_DROPIN" ] && grep -qxF "$QS_MARK" "$WORKTREES_DROPIN"; then
        echo "$WORKTREES_DROPIN: installed by an earlier quick start"
    elif [ -e "$WORKTREES_DROPIN" ]; then
        echo "keeping your $WORKTREES_DROPIN"
    else
        if [ ! -d "$CONFIG_D" ]; then
            install -d -m 755 "$CONFIG_D"
            touch "$QS_STATE/made-config-d"
        fi
        { printf '%s\n' "$QS_MARK"; cat packaging/config.d/10-worktrees.toml; } >"$WORKTREES_DROPIN.tmp"
        chmod 644 "$WORKTREES_DROPIN.tmp"
        mv "$WORKTREES_DROPIN.tmp" "$WORKTREES_DROPIN"
        echo "installed $WORKTREES_DROPIN"
    fi
    WORKTREES=$(policy_dump | jq -r '[.filesystem.bind[] | select(.mode == "rw")][0].source // empty')
    [ -n "$WORKTREES" ] || die "$WORKTREES_DROPIN names no read-write [[filesystem.bind]] source"
    printf '%s\n' "$WORKTREES" >"$QS_STATE/worktree-root"
    if [ ! -d "$WORKTREES" ]; then
        run install -d -m 755 -o "${ids%:*}" -g "${ids#*:}" "$WORKTREES"
        touch "$QS_STATE/made-worktrees"
    fi
    # The quick start's own drop-in: the test host's name, and the host
    # user's ids when they are not the policy's forced user.
    {
        printf '%s\n' "$QS_MARK"
        printf '# The test host of the quick start, reached through the egress proxy.\n'
        printf '[network]\nhosts = ["%s"]\n' "$PKG_HOST"
        policy_user=$(policy_dump | jq -r '.process.user // empty')
        if [ "$policy_user" != "$ids" ]; then
            printf '\n# Containers act as the host user who ran the quick start.\n'
            printf '[process]\nuser = "%s"\n' "$ids"
        fi
    } >"$QS_DROPIN.tmp"
    chmod 644 "$QS_DROPIN.tmp"
    mv "$QS_DROPIN.tmp" "$QS_DROPIN"
    echo "installed $QS_DROPIN:"
    grep -v '^#' "$QS_DROPIN"
    run "$BIN" policy check --config "$CONFIG" ||
        die "the policy with the quick start's drop-ins is refused (above); for host user ids the policy cannot force, run without SUDO_USER (1000:1000); sudo $0 --stop removes the drop-ins"

    # The test host: one hop from the host, as a package index on the
    # internet is (the proxy refuses the subnet of any host interface).
    if ip netns list | grep -qw "$PKG_NS"; then
        for pid in $(ip netns pids "$PKG_NS"); do kill "$pid" 2>/dev/null || true; done
        ip netns del "$PKG_NS"
    fi
    ip link del "$PKG_VETH" 2>/dev/null || true
    run ip netns add "$PKG_NS"
    ip -n "$PKG_NS" link set lo up
    run ip link add "$PKG_VETH" type veth peer name eth0 netns "$PKG_NS"
    ip addr add "$PKG_LINK_HOST/30" dev "$PKG_VETH"
    ip link set "$PKG_VETH" up
    ip -n "$PKG_NS" addr add "$PKG_LINK_NS/30" dev eth0
    ip -n "$PKG_NS" link set eth0 up
    ip -n "$PKG_NS" addr add "$PKG_IP/32" dev lo
    ip -n "$PKG_NS" route add default via "$PKG_LINK_HOST"
    run ip route replace "$PKG_IP/32" via "$PKG_LINK_NS" dev "$PKG_VETH"
    www=$QS_STATE/www
    rm -rf "$www" && mkdir -p "$www/hello-agent-1.0"
    echo "hello from the quick start's package index" >"$www/hello-agent-1.0/README"
    tar -C "$www" -czf "$www/$PKG_FILE" hello-agent-1.0
    rm -rf "$www/hello-agent-1.0"
    printf '$ %s &\n' "ip netns exec $PKG_NS busybox httpd -f -p 80 -h $www" >&2
    setsid ip netns exec "$PKG_NS" busybox httpd -f -p 80 -h "$www" </dev/null >/dev/null 2>&1 &
    echo $! >"$QS_STATE/httpd.pid"
    for _ in $(seq 1 50); do
        curl -fsS --noproxy '*' -o /dev/null "http://$PKG_IP/$PKG_FILE" 2>/dev/null && break
        sleep 0.1
    done
    curl -fsS --noproxy '*' -o /dev/null "http://$PKG_IP/$PKG_FILE" ||
        die "the test host's httpd does not answer on $PKG_IP"
    hosts_unmark
    printf '%s\n%s %s\n%s\n' "$HOSTS_BEGIN" "$PKG_IP" "$PKG_HOST" "$HOSTS_END" >>/etc/hosts
    echo "test host $PKG_HOST ($PKG_IP, namespace $PKG_NS) serves $PKG_FILE ($(sha256sum "$www/$PKG_FILE" | cut -c1-16)...)"

    # An image with git: the busybox rootfs plus the host's git and curl.
    if ! docker image inspect "$GIT_IMAGE" >/dev/null 2>&1; then
        scratch=$(mktemp -d)
        build_busybox_rootfs "$scratch/rootfs" "$scratch/busybox.tar"
        git_bin=/usr/bin/git
        [ -x "$git_bin" ] || git_bin=$(command -v git)
        add_host_binaries "$scratch/rootfs" "$git_bin" "$(command -v curl)"
        if [ -d /usr/share/git-core/templates ]; then
            mkdir -p "$scratch/rootfs/usr/share/git-core"
            cp -a /usr/share/git-core/templates "$scratch/rootfs/usr/share/git-core/"
        fi
        tar --numeric-owner -C "$scratch/rootfs" -c . | docker import - "$GIT_IMAGE" >/dev/null
        rm -rf "$scratch"
        echo "built $GIT_IMAGE (busybox, $git_bin, curl and their libraries)"
    fi

    demo=$WORKTREES/$DEMO
    rm -rf "$demo"
    run install -d -m 755 -o "${ids%:*}" -g "${ids#*:}" "$demo"
    echo "An agent's work in $demo, from inside the container:"
    # The names go in the script: the policy's env_allow would drop them
    # as variables. $http_proxy is the container's.
    agent="set -e
echo '--- id'; id
echo \"--- git init, fetch the package through the proxy (\$http_proxy), commit\"
git init -q -b main .
curl -fsS -o $PKG_FILE http://$PKG_HOST/$PKG_FILE
sha256sum $PKG_FILE
tar -xzf $PKG_FILE && cat hello-agent-1.0/README
git add . && git -c user.name=agent -c user.email=agent@quickstart.invalid commit -q -m 'add $PKG_FILE'
git log --format='%h %s'"
    run docker run --rm --runtime=vibe-shim -v "$demo:/work" -w /work "$GIT_IMAGE" sh -c "$agent"
    echo "--- on the host: the worktree and its commit belong to the host user ($ids)"
    run ls -lna "$demo"
    owner=$(stat -c %u:%g "$demo/.git/HEAD")
    [ "$owner" = "$ids" ] || die "the commit is owned by $owner, not the host user $ids"
    git -c safe.directory="$demo" -C "$demo" log --format='%h %an %s'
    echo "--- the fetch's line in $EGRESS_LOG"
    grep "\"$PKG_HOST\"" "$EGRESS_LOG" | tail -n 1
    agent_summary="
  git commit             the worktree under $WORKTREES is bound read-write; files are $ids's
  package fetched        $PKG_HOST is in [network] hosts (config.d/90-quickstart.toml)"
fi

cat <<EOF

What that shows:
  CapEff/CapBnd 0        --privileged and --cap-add ALL gave no capability
  NoNewPrivs 1           setuid binaries cannot raise privileges
  Seccomp 2              a seccomp filter is on despite --privileged
  env                    GITHUB_TOKEN and AWS_SECRET_ACCESS_KEY were removed
  write to /             refused: the root filesystem is read-only
  pids.max               the policy's limit, not the unlimited -1 asked for
  403 from the proxy     example.com is not in [network] hosts; nothing was dialled$agent_summary

Policy: $CONFIG (every key documented there; check it with: $BIN policy check)
Audit log: see [audit] path in the policy (one JSON line per container and exec)
$stop_hint
Egress daemon: stop it with: sudo $0 --stop (a create in mode proxy fails while none runs);
--stop also removes the test host, the /etc/hosts block, the quick start's drop-ins and the demo worktree
EOF
