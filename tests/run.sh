#!/usr/bin/env bash
# The whole test run, as CI does it (`bash .ci/run` calls this):
#
#   sudo tests/run.sh
#
# 1. apt: install what is missing (always refresh + install when CI=true)
# 2. cargo build --release --workspace, and the static probe (cargo probe-static)
# 3. cargo fmt --check, cargo clippy -D warnings, unit + property tests,
#    policy checks of the shipped configs, runc integration tests
# 4. tests/env/up.sh: private dockerd, vibe-shim runtimes, busybox image
# 5. the end-to-end suites against that dockerd (the agent suite last,
#    after its Debian image)
# 5b. the same suites on Debian sid's stack (tests/env/sid-run.sh)
# 6. tests/env/down.sh, always (EXIT trap), also when a step fails
#
# Every test step runs even if an earlier one failed, so one run shows all
# failures; the build is the only step that stops the run. Exit status is
# non-zero if any step failed. Knobs: VIBE_TEST_KEEP=1 leaves the test dockerd
# running afterwards; VIBE_TEST_THREADS sets the e2e parallelism (default 4).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

if [ "$(id -u)" != 0 ]; then
    echo "tests/run.sh: run as root: sudo tests/run.sh" >&2
    exit 1
fi

export CI=${CI:-false}
export DEBIAN_FRONTEND=noninteractive
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
export RUST_BACKTRACE=1
# The repo's own target/ (a fresh clone in CI) unless CARGO_TARGET_DIR says
# otherwise; the tests and up.sh find the shim through VIBE_SHIM_BIN.
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
export VIBE_SHIM_BIN=$TARGET/release/vibe-shim
export REPO

LOGDIR=$TARGET/test-logs
START=$SECONDS
declare -a SUMMARY=()
FAILED=0
ENV_UP=0

summary() {
    local rc=$? line
    if [ "$ENV_UP" = 1 ]; then
        if [ "${VIBE_TEST_KEEP:-0}" = 1 ]; then
            echo "== test env left running (VIBE_TEST_KEEP=1); stop it with: sudo tests/env/down.sh"
        else
            echo "== stopping the test env"
            bash tests/env/down.sh || rc=1
        fi
    fi
    echo
    echo "== summary"
    for line in "${SUMMARY[@]}"; do echo "  $line"; done
    local elapsed=$((SECONDS - START))
    local counts=""
    if compgen -G "$LOGDIR/*.log" >/dev/null; then
        # Sum cargo's "test result:" lines over every test step.
        counts=$(awk '/^test result:/ {
                for (i = 1; i <= NF; i++) {
                    if ($(i+1) ~ /^passed/) p += $i
                    if ($(i+1) ~ /^failed/) f += $i
                }
            } END { printf "%d tests passed, %d failed", p, f }' "$LOGDIR"/*.log)
    fi
    if [ "$rc" = 0 ] && [ "$FAILED" = 0 ]; then
        printf 'vibe-shim tests: PASS in %dm%02ds (%s)\n' $((elapsed / 60)) $((elapsed % 60)) "$counts"
    else
        printf 'vibe-shim tests: FAIL in %dm%02ds (%s; %d step(s) failed%s)\n' \
            $((elapsed / 60)) $((elapsed % 60)) "$counts" "$FAILED" \
            "$([ "$rc" = 0 ] || echo ", aborted with exit $rc")"
        [ "$rc" != 0 ] || rc=1
    fi
    exit "$rc"
}
trap summary EXIT

# step NAME CMD...: run, log to $LOGDIR/NAME.log, record PASS/FAIL and time.
step() {
    local name=$1 t0=$SECONDS rc=0
    shift
    echo
    echo "== $name: $*"
    "$@" 2>&1 | tee "$LOGDIR/$name.log" || rc=$?
    local took=$((SECONDS - t0))
    if [ "$rc" = 0 ]; then
        SUMMARY+=("PASS  $name (${took}s)")
    else
        SUMMARY+=("FAIL  $name (${took}s, exit $rc; log: $LOGDIR/$name.log)")
        FAILED=$((FAILED + 1))
    fi
    return "$rc"
}

# ---- 1. system packages -----------------------------------------------------
PACKAGES=(
    docker.io runc busybox-static nftables podman containerd tini
    netavark aardvark-dns
    libseccomp-dev pkg-config build-essential iproute2 iptables jq time
    ca-certificates curl git procps debootstrap
)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
        missing+=("$pkg")
done
if [ "$CI" = true ] || [ ${#missing[@]} -gt 0 ]; then
    echo "== apt: installing ${missing[*]:-(CI: refreshing all)}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confold "${PACKAGES[@]}" >/dev/null
fi

# ---- Rust toolchain (rust-version 1.85: Debian's rustc is too old) ----------
for dir in "$HOME/.cargo/bin" /root/.cargo/bin; do
    [ -x "$dir/cargo" ] && PATH=$dir:$PATH
done
if ! command -v cargo >/dev/null; then
    echo "== rustup: installing a minimal stable toolchain"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
        sh -s -- -y -q --profile minimal -c clippy,rustfmt
    PATH=$HOME/.cargo/bin:$PATH
fi
export PATH
mkdir -p "$LOGDIR"
rm -f "$LOGDIR"/*.log
echo "== $(cargo --version), $(rustc --version)"

# ---- 2. build ----------------------------------------------------------------
# Everything below uses the release profile, so dependencies compile once.
step build cargo build --release --workspace || exit 1
# The probe linked static (e2e_probe binds it into busybox containers).
step build-probe cargo probe-static || exit 1

# ---- 3. static checks, unit/property tests, shipped configs, runc tests -----
step fmt cargo fmt --all -- --check || true
step clippy cargo clippy --workspace --all-targets -- -D warnings || true
step unit cargo test --release --workspace --no-fail-fast || true

check_configs() {
    local shim=$VIBE_SHIM_BIN f out
    for f in packaging/config.toml tests/policies/default.toml; do
        echo "-- vibe-shim policy check --config $f"
        "$shim" policy check --config "$f" >/dev/null || return 1
    done
    # The broken policy must be refused, naming the file and the bad key.
    if out=$("$shim" policy check --config tests/policies/bad-syntax.toml 2>&1); then
        echo "bad-syntax.toml was accepted" >&2
        return 1
    fi
    echo "-- bad-syntax.toml refused: $out"
    grep -q 'bad-syntax.toml' <<<"$out" && grep -q 'pid_limit' <<<"$out"
}
step configs check_configs || true

# Paths the test policies name; the shim writes its audit log there.
mkdir -p /var/log/vibe-test /var/tmp/vibe-test/worktrees

# cargo test --test X fails on a missing file, so pass only suites that exist.
suites() {
    local name args=()
    for name in "$@"; do
        [ -f "tests/tests/$name.rs" ] && args+=(--test "$name")
    done
    echo "${args[@]}"
}

# Root-only integration tests that need no dockerd: every #[ignore]d test file
# in a crate's tests/ dir (the e2e suites come after up.sh). One cargo run per
# crate, one thread: they create namespaces and containers on the host.
root_integration() {
    local crate_dir=$1 pkg file args=()
    pkg=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$crate_dir/Cargo.toml" | head -n 1)
    for file in "$crate_dir"/tests/*.rs; do
        [ -f "$file" ] || continue
        case $(basename "$file" .rs) in e2e_*) continue ;; esac
        grep -q '#\[ignore' "$file" && args+=(--test "$(basename "$file" .rs)")
    done
    [ ${#args[@]} -gt 0 ] || return 0
    step "integration-$pkg" cargo test --release --no-fail-fast -p "$pkg" "${args[@]}" \
        -- --ignored --test-threads=1 || true
}
for crate_dir in policy shim hooks tests; do
    [ -f "$crate_dir/Cargo.toml" ] && root_integration "$crate_dir"
done

# ---- 4. private dockerd with the vibe-shim runtimes ----------------------------
ENV_UP=1
step env-up bash tests/env/up.sh || exit 1
set -a
# shellcheck source=/dev/null
. "${VIBE_TEST_STATE:-/run/vibe-test}/env"
set +a

# ---- 5. end-to-end suites ---------------------------------------------------
THREADS=${VIBE_TEST_THREADS:-4}
# Tests this stack cannot run (they fail loudly if run) are left out by
# name; e2e_skips says which and why, and the summary counts them.
# shellcheck source=tests/env/filter.sh
. tests/env/filter.sh
filtered_note() {
    local n=0 arg
    for arg in "$@"; do [ "$arg" = --skip ] && n=$((n + 1)); done
    [ "$n" = 0 ] || SUMMARY+=("NOTE  $1: $n test(s) filtered out for this stack (see its log)")
}
# Every e2e_*.rs suite but the network one, which runs alone below, the
# agent one (its image first, step e2e-agent) and the authz one, which needs
# its gated dockerd (step e2e-authz).
mapfile -t E2E_NAMES < <(find tests/tests -maxdepth 1 -name 'e2e_*.rs' ! -name e2e_network.rs \
    ! -name e2e_agent.rs ! -name e2e_authz.rs -printf '%f\n' | sed 's/\.rs$//' | sort)
read -ra DOCKER_SUITES <<<"$(suites "${E2E_NAMES[@]}")"
if [ ${#DOCKER_SUITES[@]} -gt 0 ]; then
    mapfile -t E2E_SKIPS < <(e2e_skips "${VIBE_TEST_STATE:-/run/vibe-test}/env" "${E2E_NAMES[@]}")
    step e2e cargo test --release --no-fail-fast -p vibe-shim-tests "${DOCKER_SUITES[@]}" \
        -- --ignored --test-threads="$THREADS" "${E2E_SKIPS[@]}" || true
    filtered_note e2e "${E2E_SKIPS[@]}"
fi
# The network suite compares host routes/rulesets before and after, so it
# runs alone.
read -ra NET_SUITE <<<"$(suites e2e_network)"
if [ ${#NET_SUITE[@]} -gt 0 ]; then
    step e2e-network cargo test --release --no-fail-fast -p vibe-shim-tests "${NET_SUITE[@]}" \
        -- --ignored --test-threads=1 || true
fi

# ---- 5b. an agent at work ---------------------------------------------------
# The agent image (Debian bookworm with git, python3, pip, nodejs, npm, gcc:
# tests/env/agent-image.sh, cached under /var/tmp/vibe-test by its package
# list), then e2e_agent under the shipped policy plus the worktree drop-in.
read -ra AGENT_SUITE <<<"$(suites e2e_agent)"
if [ ${#AGENT_SUITE[@]} -gt 0 ]; then
    # Without its image the suite cannot run: the failed image step says so.
    step agent-image bash tests/env/agent-image.sh "${VIBE_TEST_STATE:-/run/vibe-test}" &&
        step e2e-agent cargo test --release --no-fail-fast -p vibe-shim-tests "${AGENT_SUITE[@]}" \
            -- --ignored --test-threads=1 || true
fi

# ---- 5c. the authz gate, against a private dockerd of its own ----------------
# tests/env/authz.sh starts the plugin (no systemd here) and a dockerd with
# --authorization-plugin; it is stopped again whatever the tests did.
# (tests/env/sid-run.sh runs the same against the sid tree's Docker 28.)
authz_e2e() {
    bash tests/env/authz.sh e2e
}
if [ -f tests/tests/e2e_authz.rs ]; then
    step e2e-authz authz_e2e || true
fi

# ---- 5d. the Debian package --------------------------------------------------
# The Debian package as an admin installs it: dpkg -i, `vibe-shim install`
# into scratch copies of the engine configs, dpkg -r / -P, and the host as
# found. After
# the e2e suites: it installs /usr/bin/vibe-shim and /etc/vibe-shim briefly.
step deb bash tests/env/deb.sh || true

# ---- 5e. the real lockdown ----------------------------------------------------
# The REAL lockdown: divert the packaged runc to vibe-shim, run the
# e2e_lockdown canaries with it on, uninstall, compare runc's checksum.
# Late, because while it runs every container on the host goes through
# vibe-shim (the sid phase after it has its own runc); its own EXIT trap
# uninstalls whatever fails.
lockdown_ci() {
    bash tests/env/lockdown.sh
}
if [ -f tests/env/lockdown.sh ]; then
    step lockdown lockdown_ci || true
fi

# ---- 5z. the same suites on Debian sid's stack ------------------------------
# Docker 28, containerd 2, runc 1.3 and podman 5 from a tree debootstrapped
# fresh for this run, beside the host dockerd above: sid-up.sh, every e2e
# suite again (the network one alone), sid-down.sh (always). Alone:
# `sudo tests/env/sid-run.sh`. A failure there fails CI.
sid_phase() {
    step sid-stack env VIBE_TEST_THREADS="$THREADS" bash tests/env/sid-run.sh || true
}
sid_phase

# ---- 6. down.sh runs from the EXIT trap --------------------------------------
