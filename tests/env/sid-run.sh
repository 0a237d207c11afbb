#!/usr/bin/env bash
# The sid phase of tests/run.sh, also runnable alone after a release build:
#
#   sudo tests/env/sid-run.sh [--tree DIR]
#
# sid-up.sh (a fresh debootstrapped tree, or DIR reused: see sid-up.sh),
# then every tests/tests/e2e_*.rs suite against the sid dockerd as run.sh
# runs them against the host's (e2e_network alone, one thread; e2e_agent
# after its image), then
# sid-down.sh, always. Exit status non-zero if any part failed.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
export REPO
export VIBE_SHIM_BIN=${VIBE_SHIM_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/vibe-shim}
export VIBE_TEST_STATE=${VIBE_TEST_SID_STATE:-/run/vibe-test-sid}
# Runtimes are the sid daemon's own vibe-shim, vibe-shim-<stem>.
unset VIBE_TEST_RUNTIME
THREADS=${VIBE_TEST_THREADS:-4}
for dir in "$HOME/.cargo/bin" /root/.cargo/bin; do
    [ -x "$dir/cargo" ] && PATH=$dir:$PATH
done

start=$SECONDS
failed=()
timed() {
    local name=$1 t0=$SECONDS rc=0
    shift
    echo "== sid: $name"
    "$@" || rc=$?
    echo "== sid: $name: exit $rc in $((SECONDS - t0))s"
    [ "$rc" = 0 ] || failed+=("$name")
    return "$rc"
}
finish() {
    timed down bash tests/env/sid-down.sh
    echo "== sid phase: $((SECONDS - start))s${failed[*]:+, FAILED: ${failed[*]}}"
    [ ${#failed[@]} -eq 0 ]
}
trap 'finish; exit $?' EXIT

timed up bash tests/env/sid-up.sh "$@" || exit 1

suites=()
net=()
for file in tests/tests/e2e_*.rs; do
    name=$(basename "$file" .rs)
    # e2e_authz needs the gated dockerd, e2e_agent its image: their own
    # steps below.
    [ "$name" = e2e_authz ] && continue
    [ "$name" = e2e_agent ] && continue
    if [ "$name" = e2e_network ]; then net=(--test "$name"); else suites+=(--test "$name"); fi
done
# Tests this stack cannot run are left out by name, said on stderr.
# shellcheck source=tests/env/filter.sh
. tests/env/filter.sh
if [ ${#suites[@]} -gt 0 ]; then
    names=()
    for arg in "${suites[@]}"; do [ "$arg" = --test ] || names+=("$arg"); done
    mapfile -t skips < <(e2e_skips "$VIBE_TEST_STATE/env" "${names[@]}")
    timed e2e cargo test --release --no-fail-fast -p vibe-shim-tests "${suites[@]}" \
        -- --ignored --test-threads="$THREADS" "${skips[@]}"
fi
if [ ${#net[@]} -gt 0 ]; then
    timed e2e-network cargo test --release --no-fail-fast -p vibe-shim-tests "${net[@]}" \
        -- --ignored --test-threads=1
fi
# The agent suite, after its Debian image is imported into the sid dockerd
# (built once per package list and shared with the host stack's).
if [ -f tests/tests/e2e_agent.rs ]; then
    timed agent-image bash tests/env/agent-image.sh "$VIBE_TEST_STATE" &&
        timed e2e-agent cargo test --release --no-fail-fast -p vibe-shim-tests --test e2e_agent \
            -- --ignored --test-threads=1
fi
# The real lockdown inside the sid tree, after the lockdown-off
# suites: the tree's runc diverted to vibe-shim, the e2e_lockdown canaries
# and doctor with it on, uninstall. Its EXIT trap always uninstalls.
if [ -f tests/env/sid-lockdown.sh ]; then
    timed lockdown bash tests/env/sid-lockdown.sh
fi
# The API gate against the tree's Docker 28: tests/env/authz.sh starts the
# plugin and a gated dockerd of its own from the same tree, runs
# e2e_authz.rs, and stops both (before sid-down.sh removes the tree).
if [ -f tests/tests/e2e_authz.rs ]; then
    timed e2e-authz env VIBE_AUTHZ_SID_TREE="$(cat "$VIBE_TEST_STATE/tree" 2>/dev/null || echo /nonexistent)" \
        bash tests/env/authz.sh e2e
fi
