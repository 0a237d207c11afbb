# The e2e tests a stack cannot run, and the cargo args that leave them out
# (sourced by tests/run.sh, sid-run.sh, lockdown.sh and sid-lockdown.sh).
# shellcheck shell=bash
#
# A test says what it needs in its #[ignore] reason; run on a stack without
# it, the test fails loudly (it never passes green), so the runners filter
# it out here and print what they left out and why, and the count of tests
# run never drops silently. Needs, as written in the reason:
#
#   "Docker >= 23"   a dockerd of 23 or later (dotted runtime names, BuildKit)
#   "dockerd with iptables"  a dockerd that DNATs published ports (the sid
#                    stack's runs with "iptables": false, so docker-proxy
#                    relays every publish from the host's bridge address)
#   "runc >= 1.2"    a runc that id-maps bind mounts (`runc features` lists
#                    linux.mountExtensions.idmap; the host's 1.1.5 does not)
#
# e2e_skips ENV_FILE SUITE...: prints cargo test's harness args, one per
# line (`--exact`, then `--skip NAME` per filtered test), for the suites
# (tests/tests/SUITE.rs) against the dockerd ENV_FILE names (DOCKER_HOST).
# Usage: mapfile -t skips < <(e2e_skips "$STATE/env" e2e_lockdown)
e2e_skips() {
    local env_file=$1 repo version major file suite name
    shift
    repo=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
    # shellcheck source=/dev/null
    version=$(set -a && . "$env_file" && set +a &&
        docker -H "$DOCKER_HOST" version --format '{{.Server.Version}}' 2>/dev/null) || version=
    major=${version%%.*}
    if ! [[ $major =~ ^[0-9]+$ ]]; then
        echo "e2e filter: cannot read the dockerd version from $env_file (${version:-no answer}); filtering nothing" >&2
        return 0
    fi
    local iptables
    # shellcheck source=/dev/null
    iptables=$(set -a && . "$env_file" && set +a && echo "${VIBE_TEST_DOCKER_IPTABLES:-true}")
    local runc idmap=false
    # shellcheck source=/dev/null
    runc=$(set -a && . "$env_file" && set +a && echo "${VIBE_TEST_RUNC:-runc}")
    "$runc" features 2>/dev/null | grep -q '"idmap"' && idmap=true
    local -a skipped=() why=()
    for suite in "$@"; do
        file=$repo/tests/tests/$suite.rs
        [ -f "$file" ] || continue
        # The fn after each #[ignore] whose reason names a need this stack lacks.
        while read -r need name; do
            case $need in
            docker23) [ "$major" -ge 23 ] && continue ;;
            iptables) [ "$iptables" != false ] && continue ;;
            idmap) [ "$idmap" = true ] && continue ;;
            esac
            [ -n "$name" ] && skipped+=("$suite::$name") && why+=("$need")
        done < <(awk '
            /#\[ignore = ".*Docker >= 23/ { want = "docker23"; next }
            /#\[ignore = ".*dockerd with iptables/ { want = "iptables"; next }
            /#\[ignore = ".*runc >= 1\.2/ { want = "idmap"; next }
            want && /^[[:space:]]*(pub )?fn [a-z0-9_]+/ {
                sub(/^[[:space:]]*(pub )?fn /, ""); sub(/[^a-z0-9_].*/, ""); print want, $0; want = ""
            }' "$file")
    done
    if [ ${#skipped[@]} -eq 0 ]; then
        echo "e2e filter: Docker $version: every test runs" >&2
        return 0
    fi
    echo "e2e filter: Docker $version (iptables: $iptables): ${#skipped[@]} test(s) left out (docker23: they need Docker >= 23; iptables: a dockerd that DNATs published ports; idmap: runc >= 1.2):" >&2
    echo --exact
    local k
    for k in "${!skipped[@]}"; do
        echo "e2e filter:   ${skipped[$k]} (${why[$k]})" >&2
        printf -- '--skip\n%s\n' "${skipped[$k]#*::}"
    done
}
