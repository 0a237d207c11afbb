#!/usr/bin/env bash
# The agent image of tests/tests/e2e_agent.rs: Debian bookworm (minbase)
# with the tools a coding agent uses, imported as vibe-agent:latest into
# the dockerd of a test stack.
#
#   sudo tests/env/agent-image.sh [STATE]   # STATE: the stack's state dir,
#                                           # default $VIBE_TEST_STATE or /run/vibe-test
#
# The rootfs tarball is cached under /var/tmp/vibe-test/agent-image/, named
# by a key of the release, the package list and the user below: it is
# debootstrapped again only when one of those changes (other keys' tarballs
# are removed then). The image carries the key as a label, so a dockerd that
# has this key's image gets no second import. Packages come from the host's
# own Debian mirror (its apt sources), as tests/env/sid-up.sh's tree does.
# The image sets no USER: the policy forces the uid (1000).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/env/common.sh
. "$REPO/tests/env/common.sh"

need_root

RELEASE=bookworm
AGENT_PACKAGES=(
    git python3 python3-venv python3-pip nodejs npm curl make gcc libc6-dev
    ca-certificates
)
AGENT_IMAGE=vibe-agent:latest
# The process user of the suite: uid 1000, home /home/agent, in passwd.
AGENT_PASSWD='agent:x:1000:1000:agent:/home/agent:/bin/bash'
AGENT_GROUP='agent:x:1000:'
# Directories the agent owns: its home, and /data, where the suite mounts
# a named volume (Docker copies a new volume's owner from the image).
AGENT_DIRS=(/home/agent /data)
CACHE=/var/tmp/vibe-test/agent-image

state=${1:-$STATE}
[ -f "$state/env" ] || die "$state/env missing: start the stack first (tests/env/up.sh or sid-up.sh)"
docker_host=$(sed -n 's/^DOCKER_HOST=//p' "$state/env")
[ -n "$docker_host" ] || die "no DOCKER_HOST in $state/env"
export DOCKER_HOST=$docker_host

key=$(printf '%s\n' "$RELEASE" "${AGENT_PACKAGES[*]}" "$AGENT_PASSWD" "$AGENT_GROUP" "${AGENT_DIRS[*]}" |
    sha256sum | cut -c1-16)
tar=$CACHE/$key.tar

mkdir -p "$CACHE"
# One builder at a time: stacks of several work trees share the cache.
exec 9>"$CACHE/.lock"
flock 9

if [ ! -f "$tar" ]; then
    command -v debootstrap >/dev/null || die "debootstrap missing: apt-get install debootstrap"
    # The host's own Debian mirror (deb822 or one-line sources).
    mirror=$(sed -n 's/^URIs: *\([^ ]*debian\/*\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ { print $2; exit }' \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    rm -f "$CACHE"/*.tar "$CACHE"/*.tar.tmp
    root=$CACHE/rootfs.tmp
    rm -rf --one-file-system "$root"
    # minbase first, then apt in the tree: debootstrap's own resolver
    # cannot pick a provider of a virtual package (npm's dependencies).
    log "debootstrap --variant=minbase $RELEASE $root ($mirror)"
    t0=$SECONDS
    debootstrap --variant=minbase "$RELEASE" "$root" "$mirror" >"$CACHE/debootstrap.log" 2>&1 || {
        tail -n 30 "$CACHE/debootstrap.log" >&2
        die "debootstrap failed (log: $CACHE/debootstrap.log)"
    }
    log "debootstrap took $((SECONDS - t0))s; installing ${AGENT_PACKAGES[*]}"
    t0=$SECONDS
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    unshare -m --propagation private -- sh -c '
        mount -t proc proc "$0/proc" &&
        chroot "$0" apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive chroot "$0" apt-get install -y -q \
            --no-install-recommends "$@"' \
        "$root" "${AGENT_PACKAGES[@]}" >"$CACHE/apt.log" 2>&1 || {
        tail -n 30 "$CACHE/apt.log" >&2
        die "apt-get install in the image failed (log: $CACHE/apt.log)"
    }
    log "package install took $((SECONDS - t0))s"
    rm -f "$root/usr/sbin/policy-rc.d"
    grep -q '^agent:' "$root/etc/passwd" || echo "$AGENT_PASSWD" >>"$root/etc/passwd"
    grep -q '^agent:' "$root/etc/group" || echo "$AGENT_GROUP" >>"$root/etc/group"
    grep -q '^agent:' "$root/etc/shadow" || echo 'agent:!:19000:0:99999:7:::' >>"$root/etc/shadow"
    for dir in "${AGENT_DIRS[@]}"; do install -d -m 0755 -o 1000 -g 1000 "$root$dir"; done
    # What only the build needed: downloaded .debs and the package lists.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
        "$root"/var/log/* "$root"/tmp/* "$root/etc/resolv.conf"
    tar --numeric-owner -C "$root" -cf "$tar.tmp" .
    rm -rf --one-file-system "$root"
    mv "$tar.tmp" "$tar"
    log "rootfs: $(du -h "$tar" | cut -f1) ($tar)"
fi

have=$(docker image inspect -f '{{index .Config.Labels "vibe.agent-image"}}' "$AGENT_IMAGE" 2>/dev/null || true)
if [ "$have" != "$key" ]; then
    log "importing $AGENT_IMAGE ($key) into $DOCKER_HOST"
    t0=$SECONDS
    docker import \
        --change "LABEL vibe.agent-image=$key" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        "$tar" "$AGENT_IMAGE" >/dev/null
    log "import took $((SECONDS - t0))s"
fi
