#!/usr/bin/env bash
# vibe-shim quickstart, on a fresh Debian or Ubuntu machine:
#
#   sudo packaging/quickstart.sh          # install, register, run a hostile container
#   sudo packaging/quickstart.sh --stop   # stop the egress daemon and the private
#                                         # dockerd it may have started
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

# Stops the egress daemon this script started, if any; never the package's.
stop_egress() {
    if command -v systemctl >/dev/null && systemctl is-active --quiet "$EGRESS_UNIT" 2>/dev/null; then
        run systemctl stop "$EGRESS_UNIT"
    fi
    if [ -f "$EGRESS_PID" ]; then
        local pid
        pid=$(cat "$EGRESS_PID")
        if [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$BIN" ]; then
            run kill "$pid"
            for _ in $(seq 1 50); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
        fi
        rm -f "$EGRESS_PID"
    fi
}

# Is a daemon of this script's, or the package's unit, running?
egress_running() {
    if [ -f "$EGRESS_PID" ] && [ "$(readlink "/proc/$(cat "$EGRESS_PID")/exe" 2>/dev/null)" = "$BIN" ]; then
        return 0
    fi
    command -v systemctl >/dev/null &&
        { systemctl is-active --quiet vibe-shim-egress 2>/dev/null ||
            systemctl is-active --quiet "$EGRESS_UNIT" 2>/dev/null; }
}

if [ "${1:-}" = --stop ]; then
    stop_egress
    bash tests/env/down.sh
    exit 0
fi

# ---- 1. dependencies ----------------------------------------------------------
say "1/7 dependencies"
PACKAGES=(docker.io runc busybox-static nftables tini libseccomp-dev pkg-config
    build-essential iproute2 iptables jq ca-certificates curl)
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
    say "2/7 build: skipped, the vibe-shim package is installed ($BIN)"
else
    say "2/7 build"
    TARGET=${CARGO_TARGET_DIR:-$REPO/target}
    run cargo build --release -p vibe-shim
fi

# ---- 3. install -----------------------------------------------------------------
if [ "$PACKAGED" = 1 ]; then
    say "3/7 install: skipped, the package owns $BIN and $CONFIG"
else
    say "3/7 install"
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
run "$BIN" policy check --config "$CONFIG"
echo "policy OK: $CONFIG"

# ---- 4. the egress daemon ---------------------------------------------------------
policy_json=$("$BIN" policy check --json --config "$CONFIG" | grep -v '^#')
net_mode=$(jq -r '.network.mode' <<<"$policy_json")
egress_sock=$(jq -r '.network.egress_socket' <<<"$policy_json")
if [ "$net_mode" != proxy ]; then
    say "4/7 egress daemon: not needed (network mode $net_mode)"
elif egress_running; then
    say "4/7 egress daemon: one runs already ($egress_sock)"
else
    say "4/7 egress daemon (network mode proxy)"
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
say "5/7 register vibe-shim with Docker"
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
        say "6/7 import $IMAGE"
        rootfs=$(mktemp -d)
        chmod 755 "$rootfs"
        (cd "$rootfs" && mkdir -p -m 755 bin etc proc sys dev run root && mkdir -m 1777 tmp)
        cp /bin/busybox "$rootfs/bin/busybox"
        for applet in $(/bin/busybox --list); do
            [ "$applet" = busybox ] || ln -s busybox "$rootfs/bin/$applet"
        done
        tar --numeric-owner -C "$rootfs" -c . | docker import - "$IMAGE" >/dev/null
        rm -rf "$rootfs"
    else
        say "6/7 $IMAGE already present"
    fi
    stop_hint="vibe-shim stays registered in $DAEMON_JSON (runtime \"vibe-shim\")"
else
    [ "$MODE" != system ] || die "no Docker daemon answers on $SYSTEM_SOCK"
    echo "no system Docker daemon answers on $SYSTEM_SOCK: starting a private one"
    mkdir -p "$VIBE_TEST_POLICY_DIR"
    ln -sfn "$CONFIG" "$VIBE_TEST_POLICY_DIR/default.toml"
    say "6/7 private dockerd + $IMAGE"
    bash tests/env/up.sh
    export DOCKER_HOST=unix://$VIBE_TEST_STATE/docker.sock
    stop_hint="private dockerd left running: export DOCKER_HOST=$DOCKER_HOST to use it; stop it with: sudo $0 --stop"
fi

# ---- 7. a hostile container ------------------------------------------------------
say "7/7 a hostile container through vibe-shim"
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

cat <<EOF

What that shows:
  CapEff/CapBnd 0        --privileged and --cap-add ALL gave no capability
  NoNewPrivs 1           setuid binaries cannot raise privileges
  Seccomp 2              a seccomp filter is on despite --privileged
  env                    GITHUB_TOKEN and AWS_SECRET_ACCESS_KEY were removed
  write to /             refused: the root filesystem is read-only
  pids.max               the policy's limit, not the unlimited -1 asked for
  403 from the proxy     example.com is not in [network] hosts; nothing was dialled

Policy: $CONFIG (every key documented there; check it with: $BIN policy check)
Audit log: see [audit] path in the policy (one JSON line per container and exec)
$stop_hint
Egress daemon: stop it with: sudo $0 --stop (a create in mode proxy fails while none runs)
EOF
