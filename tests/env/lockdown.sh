#!/usr/bin/env bash
# The REAL lockdown on this host, for CI's throwaway VM (tests/run.sh's
# "lockdown" step, after e2e-network): divert the packaged /usr/sbin/runc to
# vibe-shim, run the e2e_lockdown canaries against the test dockerd (default
# runtime runc) and its containerd, then uninstall and check that runc is
# back byte for byte. Never run it on a shared host: while it runs, every
# container on the host goes through vibe-shim.
#
# Alone (test env up, release build done):
#   sudo tests/env/up.sh && sudo bash tests/env/lockdown.sh; sudo tests/env/down.sh
#
# Whatever fails, the EXIT trap uninstalls the lockdown, puts back any
# /etc/vibe-shim/{config,build}.toml that was there, and compares checksums.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"
need_root
cd "$REPO"

RUNC=/usr/sbin/runc
ETC=/etc/vibe-shim
# A root-owned copy: every container on the host will run through it.
SHIM_DIR=/usr/local/lib/vibe-shim-ci
SHIM=$SHIM_DIR/vibe-shim
SAVED=$(mktemp -d /run/vibe-lockdown-ci.XXXXXX)

[ -f "$STATE/env" ] || die "test env missing ($STATE/env): run tests/env/up.sh first"
[ -x "$SHIM_BIN" ] || die "vibe-shim binary $SHIM_BIN missing: cargo build --release"
dpkg-query -S "$RUNC" >/dev/null 2>&1 || die "$RUNC is not from a Debian package; this step tests the divert"

before=$(sha256sum <"$RUNC")
mode_before=$(stat -c %a "$RUNC")
log "runc before: $before ($(dpkg-divert --list '*runc*' | wc -l) diversions)"

cleanup() {
    local rc=$? after
    trap - EXIT INT TERM HUP
    if [ -x "$SHIM" ]; then
        "$SHIM" uninstall lockdown || rc=1
    fi
    if [ "${authz_up:-0}" = 1 ]; then
        bash "$REPO/tests/env/authz.sh" down || rc=1
    fi
    rm -rf "$SHIM_DIR"
    for f in config.toml build.toml; do
        rm -f "$ETC/$f"
        if [ -f "$SAVED/$f" ]; then mv "$SAVED/$f" "$ETC/$f"; fi
    done
    rm -f "$SAVED/install.out"
    rmdir "$SAVED" "$ETC" 2>/dev/null || true
    after=$(sha256sum <"$RUNC" 2>/dev/null || echo missing)
    if [ "$(stat -c %a "$RUNC" 2>/dev/null)" != "$mode_before" ]; then
        log "FAIL: $RUNC mode $(stat -c %a "$RUNC" 2>/dev/null) after uninstall, was $mode_before"
        rc=1
    fi
    if [ "$after" != "$before" ] || [ -L "$RUNC" ]; then
        log "FAIL: $RUNC differs after uninstall ($after)"
        rc=1
    else
        log "runc restored byte for byte: $after"
    fi
    if dpkg-divert --list '*runc*' | grep -q vibe-shim; then
        log "FAIL: a vibe-shim diversion is left: $(dpkg-divert --list '*runc*')"
        rc=1
    fi
    exit "$rc"
}
trap cleanup EXIT INT TERM HUP

# The policy runc-as-vibe-shim reads: the test default policy, plus the
# build profile for BuildKit bundles under the test dockerd's data-root.
mkdir -p "$ETC"
for f in config.toml build.toml; do
    if [ -f "$ETC/$f" ]; then mv "$ETC/$f" "$SAVED/$f"; fi
done
sed -e "s#/var/lib/docker/buildkit/executor#$DATA_ROOT/buildkit/executor#" \
    -e "s#/var/log/vibe-shim/audit.jsonl#$AUDIT_DIR/audit.jsonl#" \
    packaging/build.toml >"$ETC/build.toml"
{
    cat tests/policies/default.toml
    printf '\n[[profiles]]\nname = "build"\nconfig = "build.toml"\n'
    printf 'when = { bundle_under = ["%s/buildkit/executor"] }\n' "$DATA_ROOT"
} >"$ETC/config.toml"
"$SHIM_BIN" policy check --config "$ETC/config.toml" >/dev/null
"$SHIM_BIN" policy check --config "$ETC/build.toml" >/dev/null

install -d -m 0755 "$SHIM_DIR"
install -m 0755 "$SHIM_BIN" "$SHIM"

log "install lockdown (twice: idempotent)"
"$SHIM" install lockdown | tee "$SAVED/install.out"
grep -q '(divert)' "$SAVED/install.out" || die "expected the divert mode on Debian"
out=$("$SHIM" install lockdown)
grep -q 'already installed' <<<"$out" || die "second install was not a no-op: $out"
[ "$(readlink "$RUNC")" = "$SHIM" ] || die "$RUNC is not vibe-shim's link"
[ "$(sha256sum <"$RUNC.vibe-shim-real")" = "$before" ] || die "the diverted runc is not the original"
# No execute bit: a client naming it (ctr --runc-binary) gets EACCES, root too.
[ "$(stat -c %a "$RUNC.vibe-shim-real")" = 400 ] || die "the diverted runc is not mode 0400"
if "$RUNC.vibe-shim-real" --version >/dev/null 2>&1; then die "the diverted runc runs by path"; fi
"$RUNC" --version | grep -q '^runc version' || die "runc through vibe-shim does not reach the real runc"

log "canaries with lockdown on"
for dir in "$HOME/.cargo/bin" /root/.cargo/bin; do
    if [ -x "$dir/cargo" ]; then PATH=$dir:$PATH; fi
done
# shellcheck source=tests/env/filter.sh
. "$REPO/tests/env/filter.sh"
mapfile -t skips < <(e2e_skips "$STATE/env" e2e_lockdown)
VIBE_LOCKDOWN=on cargo test --release -p vibe-shim-tests --test e2e_lockdown \
    -- --ignored --test-threads=2 "${skips[@]}"

# doctor on a host with lockdown + the authz gate (the production path): every
# door closed, exit 0. The gate's own dockerd, its plugin told that `runc` is
# vibe-shim's now. Then the same after uninstall: the runc door is open again.
# An allowed read-write bind of the test policy (the bind-creation row).
WORKTREE=/var/tmp/vibe-test/worktrees
doctor_run() {
    # shellcheck source=/dev/null
    (set -a && . /run/vibe-authz/env && set +a &&
        "$SHIM_BIN" doctor -H "$DOCKER_HOST" --image "$IMAGE" --worktree "$WORKTREE")
}
VIBE_AUTHZ_ALSO_ALLOW=runc bash tests/env/authz.sh up
authz_up=1
log "doctor with lockdown + authz (must exit 0)"
doctor_run || die "doctor found an open door with lockdown + authz"

log "uninstall lockdown (twice: idempotent)"
"$SHIM" uninstall lockdown
log "doctor with authz but no lockdown (must exit non-zero)"
if doctor_run; then die "doctor exited 0 without lockdown"; fi
out=$("$SHIM" uninstall lockdown)
grep -q 'not installed' <<<"$out" || die "second uninstall was not a no-op: $out"
# cleanup (EXIT) compares the checksums and restores /etc/vibe-shim.
