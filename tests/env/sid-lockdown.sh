#!/usr/bin/env bash
# The REAL lockdown on the sid stack, run by sid-run.sh after the
# lockdown-off suites: inside the sid tree (its own dpkg, its own
# /usr/sbin/runc; never the host's), `vibe-shim install lockdown` diverts the
# tree's runc to a root-owned copy of vibe-shim placed in the tree, with
# the tree's /etc/vibe-shim/{config,build}.toml (the build profile on the
# sid dockerd's <data-root>/buildkit/executor). Then the e2e_lockdown
# canaries with VIBE_LOCKDOWN=on (BuildKit RUN steps included), `vibe-shim
# doctor` in the engine's mount namespace (runtime doors closed), uninstall
# (twice), doctor again (non-zero), and the tree's runc byte for byte. With
# lockdown on, also the API gate on the tree's Docker 28 (tests/env/authz.sh)
# and doctor against it: exit 0; after uninstall, non-zero.
#
# Alone (sid stack up, release build done):
#   sudo VIBE_TEST_SID_STATE=... bash tests/env/sid-lockdown.sh
#
# Whatever fails, the EXIT trap uninstalls, puts the tree's /etc/vibe-shim
# back as it was, and compares checksums.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"
# shellcheck source=tests/env/sid-common.sh
. "$REPO/tests/env/sid-common.sh"
need_root
cd "$REPO"

sid_running || die "the sid dockerd is not running ($SID_STATE): run tests/env/sid-up.sh first"
[ -f "$SID_STATE/tree" ] && SID_TREE=$(cat "$SID_STATE/tree")
[ -x "$SHIM_BIN" ] || die "vibe-shim binary $SHIM_BIN missing: cargo build --release"
T=$SID_TREE
IN=$SID_STATE/bin/in-tree
RUNC=/usr/sbin/runc
# In the tree: a root-owned copy, what every sid container will run through.
SHIM_DIR=/usr/local/lib/vibe-shim-ci
SHIM=$SHIM_DIR/vibe-shim
ETC=$T/etc/vibe-shim
SAVED=$(mktemp -d "$SID_STATE/lockdown.XXXXXX")
t_start=$SECONDS

"$IN" dpkg-query -S "$RUNC" >/dev/null 2>&1 || die "$RUNC in the tree is not from a package"
if "$IN" dpkg-divert --list '*runc*' | grep -q .; then
    die "the tree already has a runc diversion: $("$IN" dpkg-divert --list '*runc*')"
fi
before=$(sha256sum <"$T$RUNC")
mode_before=$(stat -c %a "$T$RUNC")
log "tree runc before: $before"

cleanup() {
    local rc=$? after
    trap - EXIT INT TERM HUP
    if [ -x "$T$SHIM" ]; then
        # From the host (the host's dpkg-divert on the tree) if the engine's
        # namespace is gone.
        "$IN" "$SHIM" uninstall lockdown ||
            "$SHIM_BIN" uninstall lockdown --root "$T" || rc=1
    fi
    if [ "${authz_up:-0}" = 1 ]; then
        VIBE_AUTHZ_SID_TREE=$T bash "$REPO/tests/env/authz.sh" down || rc=1
    fi
    rm -rf --one-file-system "${T:?}$SHIM_DIR"
    # The tree's /etc/vibe-shim as sid-up.sh left it (a link to the host's).
    if [ "${etc_moved:-0}" = 1 ]; then
        rm -rf --one-file-system "$ETC"
        if [ -e "$SAVED/etc" ] || [ -L "$SAVED/etc" ]; then mv "$SAVED/etc" "$ETC"; fi
    fi
    rm -rf "$SAVED"
    after=$(sha256sum <"$T$RUNC" 2>/dev/null || echo missing)
    if [ "$(stat -c %a "$T$RUNC" 2>/dev/null)" != "$mode_before" ]; then
        log "FAIL: the tree's $RUNC mode $(stat -c %a "$T$RUNC" 2>/dev/null) after uninstall, was $mode_before"
        rc=1
    fi
    if [ "$after" != "$before" ] || [ -L "$T$RUNC" ]; then
        log "FAIL: the tree's $RUNC differs after uninstall ($after)"
        rc=1
    else
        log "tree runc restored byte for byte: $after"
    fi
    if dpkg-divert --root "$T" --list '*runc*' | grep -q .; then
        log "FAIL: a diversion is left in the tree: $(dpkg-divert --root "$T" --list '*runc*')"
        rc=1
    fi
    log "sid lockdown: $((SECONDS - t_start))s, exit $rc"
    exit "$rc"
}
trap cleanup EXIT INT TERM HUP

# The policy runc-as-vibe-shim reads in the tree: the test default policy,
# plus the build profile for BuildKit bundles under the sid dockerd's
# data-root (/var/lib/docker in the tree, packaging/build.toml's default).
if [ -e "$ETC" ] || [ -L "$ETC" ]; then mv "$ETC" "$SAVED/etc"; fi
etc_moved=1
install -d -m 0755 "$ETC"
sed -e "s#/var/log/vibe-shim/audit.jsonl#$AUDIT_DIR/audit.jsonl#" \
    packaging/build.toml >"$ETC/build.toml"
{
    cat tests/policies/default.toml
    printf '\n[[profiles]]\nname = "build"\nconfig = "build.toml"\n'
    printf 'when = { bundle_under = ["/var/lib/docker/buildkit/executor"] }\n'
} >"$ETC/config.toml"
"$IN" "$SHIM_BIN" policy check --config /etc/vibe-shim/config.toml >/dev/null
"$IN" "$SHIM_BIN" policy check --config /etc/vibe-shim/build.toml >/dev/null

install -d -m 0755 "$T$SHIM_DIR"
install -m 0755 "$SHIM_BIN" "$T$SHIM"

log "install lockdown in the tree (twice: idempotent)"
"$IN" "$SHIM" install lockdown | tee "$SAVED/install.out"
grep -q '(divert)' "$SAVED/install.out" || die "expected the divert mode in the tree"
out=$("$IN" "$SHIM" install lockdown)
grep -q 'already installed' <<<"$out" || die "second install was not a no-op: $out"
[ "$(readlink "$T$RUNC")" = "$SHIM" ] || die "the tree's $RUNC is not vibe-shim's link"
[ "$(sha256sum <"$T$RUNC.vibe-shim-real")" = "$before" ] || die "the diverted runc is not the original"
# No execute bit: a client naming it (ctr --runc-binary) gets EACCES, root too.
[ "$(stat -c %a "$T$RUNC.vibe-shim-real")" = 400 ] || die "the diverted runc is not mode 0400"
if "$IN" "$RUNC.vibe-shim-real" --version >/dev/null 2>&1; then die "the diverted runc runs by path"; fi
"$IN" "$RUNC" --version | grep -q '^runc version' || die "runc through vibe-shim does not reach the real runc"
"$IN" dpkg-divert --list '*runc*'

log "e2e_lockdown canaries with lockdown on (sid stack)"
for dir in "$HOME/.cargo/bin" /root/.cargo/bin; do
    if [ -x "$dir/cargo" ]; then PATH=$dir:$PATH; fi
done
t0=$SECONDS
AUDIT=$AUDIT_DIR/audit.jsonl
audit_before=$(wc -l <"$AUDIT" 2>/dev/null || echo 0)
# shellcheck source=tests/env/filter.sh
. "$REPO/tests/env/filter.sh"
mapfile -t skips < <(e2e_skips "$SID_STATE/env" e2e_lockdown)
VIBE_TEST_STATE=$SID_STATE VIBE_LOCKDOWN=on cargo test --release -p vibe-shim-tests \
    --test e2e_lockdown -- --ignored --test-threads=2 "${skips[@]}"
log "canaries: $((SECONDS - t0))s"
# Host evidence that dockerd's BuildKit exec'd `runc` from PATH (vibe-shim
# now) and that the build profile was chosen for its executor bundles.
steps=$(tail -n "+$((audit_before + 1))" "$AUDIT" | grep -c '"config":"/etc/vibe-shim/build.toml"' || true)
[ "$steps" -gt 0 ] || die "no audit line with the build profile: BuildKit RUN steps did not run through vibe-shim"
log "BuildKit RUN steps audited under the build profile: $steps lines"

# doctor in the engine's mount namespace (with the tree's docker CLI), so
# its bind-source row looks at the filesystem the sid dockerd writes to.
# WORKTREE: an allowed read-write bind of the test policy, the same path in
# both namespaces (the bind-creation row).
WORKTREE=/var/tmp/vibe-test/worktrees
doctor_run() {
    "$IN" "$SHIM_BIN" doctor -H "unix://$SID_STATE/docker.sock" --image "$IMAGE" --worktree "$WORKTREE"
}
# Closed by lockdown: every door the runtime sees. The `docker cp`,
# bind-source and bind-creation rows only the authz gate closes; the sid
# dockerd runs none here, so they are printed, not judged.
RUNTIME_DOORS=("--runtime=runc" "(no --runtime)" "--runtime=io.containerd.runc.v2"
    "--runtime=x.runc.v2" "--privileged")
log "doctor with lockdown (runtime doors must be closed)"
doctor_run >"$SAVED/doctor.out" || true
cat "$SAVED/doctor.out"
# A row is the door padded with spaces, the result, the evidence.
result() {
    local line
    line=$(awk -v d="$1  " 'index($0, d) == 1 { print; exit }' "$SAVED/doctor.out")
    [ -n "$line" ] || die "doctor printed no row for $1"
    awk '{ print $1 }' <<<"${line#"$1"}"
}
for door in "${RUNTIME_DOORS[@]}"; do
    [ "$(result "$door")" = closed ] || die "doctor: door $door not closed under lockdown"
done

# The production path on Docker 28: lockdown + the API gate (authz.sh's own
# gated dockerd from this same tree, its plugin told that `runc` is
# vibe-shim's now). Every door closed: doctor exits 0.
# In the gated dockerd's own mount namespace (the tree): doctor's lockdown
# rows resolve runc as that engine does, never as the host does.
doctor_gated() {
    # shellcheck source=/dev/null
    (set -a && . "$AUTHZ_ENV" && set +a &&
        nsenter -t "$(cat "$AUTHZ_STATE_DIR/docker.pid")" -m -- \
            "$SHIM_BIN" doctor -H "$DOCKER_HOST" --image "$IMAGE" --worktree "$WORKTREE")
}
AUTHZ_STATE_DIR=${VIBE_AUTHZ_STATE:-/run/vibe-authz-sid}
AUTHZ_ENV=$AUTHZ_STATE_DIR/env
log "the API gate on the tree's Docker 28"
authz_up=1
VIBE_AUTHZ_SID_TREE=$T VIBE_AUTHZ_ALSO_ALLOW=runc bash tests/env/authz.sh up
log "doctor with lockdown + authz (must exit 0)"
doctor_gated || die "doctor found an open door on Docker 28 with lockdown + authz"

log "uninstall lockdown (twice: idempotent)"
"$IN" "$SHIM" uninstall lockdown
out=$("$IN" "$SHIM" uninstall lockdown)
grep -q 'not installed' <<<"$out" || die "second uninstall was not a no-op: $out"
log "doctor without lockdown (must exit non-zero, --runtime=runc OPEN)"
if doctor_run >"$SAVED/doctor.out"; then
    cat "$SAVED/doctor.out"
    die "doctor exited 0 without lockdown"
fi
cat "$SAVED/doctor.out"
# Unless an authz gate on this dockerd refuses runc too, the runc door is open.
if ! grep -q 'authorization denied' "$SAVED/doctor.out"; then
    [ "$(result --runtime=runc)" = OPEN ] || die "doctor: --runtime=runc not OPEN without lockdown"
fi
log "doctor with authz but no lockdown (must exit non-zero)"
if doctor_gated; then die "doctor exited 0 on Docker 28 without lockdown"; fi
# cleanup (EXIT) compares the checksums and restores the tree's /etc/vibe-shim.
