#!/usr/bin/env bash
# The authz gate's test environment: the plugin (`vibe-shim authz`) and a
# private dockerd OF ITS OWN started with --authorization-plugin, so no other
# daemon ever goes through the test plugin.
#
#   sudo tests/env/authz.sh up            # plugin, then dockerd (needs the
#                                         # busybox tarball tests/env/up.sh made)
#   sudo tests/env/authz.sh down          # stops both, removes the state
#   sudo tests/env/authz.sh plugin-start  # (re)starts the plugin only
#   sudo tests/env/authz.sh plugin-stop
#   sudo tests/env/authz.sh plugin-kill   # SIGKILL, stale socket left
#   sudo tests/env/authz.sh e2e           # up, tests/tests/e2e_authz.rs, down
#
# VIBE_AUTHZ_SID_TREE=DIR: the gated dockerd is the one in that Debian sid
# tree (Docker 28.5; tests/env/sid-up.sh makes the tree), run in a private
# mount namespace after pivot_root by sid-up.sh's --inside mode, with the
# same shared paths plus /run/docker/plugins (where it finds the plugin,
# which runs on the host and so judges paths in the host's view: the tests
# use only paths that are the same in both). Unset (the default): the host's
# dockerd (20.10).
#
# dockerd finds a v1 plugin by name in /run/docker/plugins (fixed, whatever
# the exec-root), so the plugin is $AUTHZ_PLUGIN there. On hosts without
# systemd this script is how the plugin runs. The runtime registered is
# ${VIBE_TEST_RUNTIME:-vibe-shim} (what runtime() in tests/src/docker.rs
# names), with tests/policies/default.toml, and it is the daemon's default
# runtime; the plugin judges with the same policy and accepts only that
# runtime. The daemon has "bridge": "none" and "iptables": false: it touches
# no host network. The env for tests/tests/e2e_authz.rs is $AUTHZ_STATE/env.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"

SID_TREE_DIR=${VIBE_AUTHZ_SID_TREE:-}
if [ -n "$SID_TREE_DIR" ]; then
    AUTHZ_STATE=${VIBE_AUTHZ_STATE:-/run/vibe-authz-sid}
else
    AUTHZ_STATE=${VIBE_AUTHZ_STATE:-/run/vibe-authz}
fi
AUTHZ_DATA_ROOT=${VIBE_AUTHZ_DATA_ROOT:-/var/lib/vibe-authz}
AUTHZ_PLUGIN=${VIBE_AUTHZ_PLUGIN:-vibe-shim-test}
PLUGIN_SOCK=/run/docker/plugins/$AUTHZ_PLUGIN.sock
RUNTIME=${VIBE_TEST_RUNTIME:-vibe-shim}
# More runtime names the plugin accepts as vibe-shim's (space-separated):
# tests/env/lockdown.sh adds `runc` while runc is diverted to vibe-shim.
ALSO_ALLOW=${VIBE_AUTHZ_ALSO_ALLOW:-}
# More flags for the plugin (space-separated): e2e_authz restarts it with
# --allow-bind-create for one test.
PLUGIN_ARGS=${VIBE_AUTHZ_PLUGIN_ARGS:-}
POLICY=$REPO/tests/policies/default.toml
SOCK=$AUTHZ_STATE/docker.sock

plugin_running() {
    local pid
    [ -f "$AUTHZ_STATE/plugin.pid" ] || return 1
    pid=$(cat "$AUTHZ_STATE/plugin.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = vibe-shim ]
}

authz_dockerd_running() {
    local pid
    [ -f "$AUTHZ_STATE/docker.pid" ] || return 1
    pid=$(cat "$AUTHZ_STATE/docker.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}

plugin_start() {
    mkdir -p "$AUTHZ_STATE"
    if plugin_running; then
        log "authz plugin already running (pid $(cat "$AUTHZ_STATE/plugin.pid"))"
        return 0
    fi
    [ -x "$SHIM_BIN" ] || die "$SHIM_BIN missing: cargo build --release"
    log "starting authz plugin $AUTHZ_PLUGIN (log: $AUTHZ_STATE/plugin.log)"
    local also=() name extra=()
    for name in $ALSO_ALLOW; do also+=(--runtime "$name"); done
    read -ra extra <<<"$PLUGIN_ARGS"
    setsid "$SHIM_BIN" authz --config "$POLICY" --socket "$PLUGIN_SOCK" \
        --runtime "$RUNTIME" "${also[@]}" --default-runtime "$RUNTIME" "${extra[@]}" \
        </dev/null >>"$AUTHZ_STATE/plugin.log" 2>&1 &
    echo $! >"$AUTHZ_STATE/plugin.pid"
    local deadline=$((SECONDS + 10))
    until [ -S "$PLUGIN_SOCK" ] &&
        curl -sf --unix-socket "$PLUGIN_SOCK" -X POST http://plugin/Plugin.Activate >/dev/null; do
        kill -0 "$(cat "$AUTHZ_STATE/plugin.pid")" 2>/dev/null ||
            { tail -n 5 "$AUTHZ_STATE/plugin.log" >&2 || true; die "authz plugin exited"; }
        [ $SECONDS -lt $deadline ] || die "authz plugin did not answer on $PLUGIN_SOCK"
        sleep 0.2
    done
}

plugin_stop() {
    if plugin_running; then
        local pid
        pid=$(cat "$AUTHZ_STATE/plugin.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    fi
    rm -f "$AUTHZ_STATE/plugin.pid" "$PLUGIN_SOCK"
}

# As a crash leaves it: SIGKILL, the socket file stays behind.
plugin_kill() {
    if plugin_running; then
        local pid
        pid=$(cat "$AUTHZ_STATE/plugin.pid")
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    fi
    rm -f "$AUTHZ_STATE/plugin.pid"
}

up() {
    need_root
    mkdir -p "$AUTHZ_STATE" "$WORKTREES" /run/docker/plugins
    [ -n "$SID_TREE_DIR" ] || mkdir -p "$AUTHZ_DATA_ROOT"
    plugin_start
    local stack=host extra='{}'
    if [ -n "$SID_TREE_DIR" ]; then
        stack=sid
        [ -x "$SID_TREE_DIR/usr/bin/dockerd" ] || [ -x "$SID_TREE_DIR/usr/sbin/dockerd" ] ||
            die "no dockerd in $SID_TREE_DIR: make the tree with tests/env/sid-up.sh"
        # The data-root is inside the tree; Docker >= 27 wants ip6tables
        # off with iptables off.
        extra=$(jq -n --arg dr "$AUTHZ_DATA_ROOT" '{"data-root": $dr, ip6tables: false}')
    fi
    jq -n --arg rt "$RUNTIME" --arg path "$SHIM_BIN" --arg cfg "$POLICY" --arg plugin "$AUTHZ_PLUGIN" \
        --argjson extra "$extra" '{
        runtimes: {($rt): {path: $path, runtimeArgs: ["--config", $cfg]}},
        "default-runtime": $rt,
        "authorization-plugins": [$plugin],
        bridge: "none",
        iptables: false,
        "ip-forward": false,
        "ip-masq": false,
        "log-driver": "json-file",
        "storage-driver": "overlay2"
    } + $extra' >"$AUTHZ_STATE/daemon.json"
    if ! authz_dockerd_running; then
        rm -f "$AUTHZ_STATE/docker.pid" "$SOCK"
        log "starting private $stack dockerd for authz (log: $AUTHZ_STATE/dockerd.log)"
        if [ "$stack" = sid ]; then
            # sid-up.sh --inside: exec-root $AUTHZ_STATE/exec, socket,
            # pidfile and daemon.json in $AUTHZ_STATE, as below.
            local shared shim_dir
            shared="/tmp /var/tmp/vibe-test $AUDIT_DIR /run/vibe-shim /run/docker/plugins $AUTHZ_STATE $REPO"
            shim_dir=$(dirname "$(readlink -f "$SHIM_BIN")")
            case $shim_dir/ in "$REPO"/*) ;; *) shared="$shared $shim_dir" ;; esac
            mkdir -p -m 0700 /run/vibe-shim && mkdir -p "$AUDIT_DIR"
            VIBE_TEST_SID_STATE=$AUTHZ_STATE SID_TREE=$SID_TREE_DIR SID_SHARED=$shared \
                setsid unshare -m --propagation private -- \
                bash "$REPO/tests/env/sid-up.sh" --inside \
                </dev/null >>"$AUTHZ_STATE/dockerd.log" 2>&1 &
        else
            setsid dockerd \
                --data-root "$AUTHZ_DATA_ROOT" \
                --exec-root "$AUTHZ_STATE/exec" \
                -H "unix://$SOCK" \
                --pidfile "$AUTHZ_STATE/docker.pid" \
                --config-file "$AUTHZ_STATE/daemon.json" \
                </dev/null >>"$AUTHZ_STATE/dockerd.log" 2>&1 &
        fi
    fi
    local deadline=$((SECONDS + 60))
    until docker -H "unix://$SOCK" version >/dev/null 2>&1; do
        if [ $SECONDS -ge $deadline ]; then
            tail -n 30 "$AUTHZ_STATE/dockerd.log" >&2 || true
            die "authz dockerd did not answer on $SOCK within 60s"
        fi
        sleep 0.5
    done
    if ! docker -H "unix://$SOCK" image inspect "$IMAGE" >/dev/null 2>&1; then
        [ -f "$STATE/busybox-rootfs.tar" ] || die "$STATE/busybox-rootfs.tar missing: run tests/env/up.sh first"
        log "importing $IMAGE"
        docker -H "unix://$SOCK" import "$STATE/busybox-rootfs.tar" "$IMAGE" >/dev/null
    fi
    cat >"$AUTHZ_STATE/env.tmp" <<EOF
DOCKER_HOST=unix://$SOCK
AUTHZ_PLUGIN=$AUTHZ_PLUGIN
AUTHZ_PLUGIN_SOCK=$PLUGIN_SOCK
AUTHZ_PLUGIN_LOG=$AUTHZ_STATE/plugin.log
AUTHZ_RUNTIME=$RUNTIME
AUTHZ_SCRIPT=$REPO/tests/env/authz.sh
AUTHZ_STACK=$stack
AUTHZ_DOCKER_VERSION=$(docker -H "unix://$SOCK" version --format '{{.Server.Version}}')
EOF
    mv "$AUTHZ_STATE/env.tmp" "$AUTHZ_STATE/env"
    log "authz ready: DOCKER_HOST=unix://$SOCK"
}

down() {
    need_root
    rm -f "$AUTHZ_STATE/env"
    if authz_dockerd_running; then
        local pid
        pid=$(cat "$AUTHZ_STATE/docker.pid")
        # The plugin must answer while dockerd removes its containers.
        plugin_start >/dev/null 2>&1 || true
        docker -H "unix://$SOCK" ps -aq 2>/dev/null | xargs -r docker -H "unix://$SOCK" rm -f >/dev/null 2>&1 || true
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 150); do [ -d "/proc/$pid" ] || break; sleep 0.2; done
    fi
    plugin_stop
    rm -f "$AUTHZ_STATE/docker.pid" "$SOCK"
}

# up, the e2e_authz suite (VIBE_AUTHZ_E2E=1), down (always): tests/run.sh's
# e2e-authz step and tests/env/sid-run.sh's. Non-zero if any part failed.
e2e() {
    local rc=0
    # A subshell: up's `die` exits, and down must still run.
    (up) || rc=1
    if [ "$rc" = 0 ]; then
        VIBE_AUTHZ_E2E=1 VIBE_AUTHZ_STATE=$AUTHZ_STATE \
            cargo test --release --no-fail-fast -p vibe-shim-tests --test e2e_authz \
            -- --ignored --test-threads="${VIBE_AUTHZ_THREADS:-2}" || rc=1
    fi
    down || rc=1
    return "$rc"
}

case ${1:-} in
up) up ;;
e2e) e2e ;;
down) down ;;
plugin-start) plugin_start ;;
plugin-stop) plugin_stop ;;
plugin-kill) plugin_kill ;;
*) die "usage: $0 up|down|e2e|plugin-start|plugin-stop|plugin-kill" ;;
esac
