#!/usr/bin/env bash
# tests/env/deb.sh: build the .deb, install it on this host, configure
# scratch copies of the engine configs with it, remove and purge it, and
# prove the host is as it was found: an admin's uninstall must leave no
# trace in the engines' configs. Then the documented move from a quick
# start install to the package and back (docs/admin/install.md), with an
# edited policy that must survive both ways. tests/run.sh runs it
# after the end-to-end suites. Never touches the test dockerd's config, nor
# /etc/docker, /etc/containerd, /etc/containers (they are only checksummed).
set -euo pipefail

REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$REPO"
PKG=vibe-shim
BIN=/usr/bin/vibe-shim
QS_BIN=/usr/local/bin/vibe-shim
TARGET=${CARGO_TARGET_DIR:-$REPO/target}

if dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q 'installed'; then
    echo "deb.sh: $PKG is installed on this host already; this test would remove it" >&2
    exit 1
fi

if ! command -v cargo-deb >/dev/null; then
    t0=$SECONDS
    echo "-- cargo install cargo-deb --locked"
    cargo install cargo-deb --locked --quiet
    echo "-- cargo-deb installed in $((SECONDS - t0))s"
fi
cargo deb -p vibe-shim --no-build
deb=$(ls -t "$TARGET"/debian/vibe-shim_*.deb | head -n 1)
echo "-- package: $deb"

WORK=$(mktemp -d /var/tmp/vibe-deb-test.XXXXXX)
SAVED_ETC=
SAVED_QS=
SAVED_STATE=
# Puts back what the host had: its policy, a quick start's binary, its
# state (the volume claims the e2e suites left; purge removes the state).
restore_host() {
    if [ -n "$SAVED_STATE" ]; then
        rm -rf /var/lib/vibe-shim
        mv "$SAVED_STATE" /var/lib/vibe-shim
        SAVED_STATE=
    fi
    if [ -n "$SAVED_ETC" ]; then
        rm -rf /etc/vibe-shim
        mv "$SAVED_ETC" /etc/vibe-shim
        SAVED_ETC=
    fi
    if [ -n "$SAVED_QS" ]; then
        mv "$SAVED_QS" "$QS_BIN"
        SAVED_QS=
    else
        rm -f "$QS_BIN"
    fi
}
cleanup() {
    dpkg -P "$PKG" >/dev/null 2>&1 || true
    restore_host
    rm -rf "$WORK"
}
trap cleanup EXIT

# What must be the same after dpkg -r/-P: engine configs, runc and its
# diversions, and everything the package or install may leave behind.
snapshot() {
    local p
    for p in /etc/docker /etc/containerd /etc/containers /usr/sbin/runc /usr/bin/runc \
        "$BIN" "$QS_BIN" /etc/vibe-shim /var/lib/vibe-shim /lib/systemd/system/vibe-shim-authz.service \
        /lib/systemd/system/vibe-shim-egress.service /usr/share/man/man8/vibe-shim.8.gz \
        /etc/logrotate.d/vibe-shim-egress; do
        if [ -e "$p" ] || [ -L "$p" ]; then
            find "$p" \( -type f -o -type l \) -print0 | sort -z |
                xargs -0 -r sha256sum
            find "$p" -printf '%p %m %u:%g %y\n' | sort
        else
            echo "absent $p"
        fi
    done
    dpkg-divert --list '*runc*' | sort
}
snapshot >"$WORK/before"
# A policy (or a quick start's binary) already on this host goes aside, so
# the package installs as on a fresh host (an edited conffile on disk would
# stop dpkg at its prompt); restore_host puts it back.
if [ -e /etc/vibe-shim ]; then
    SAVED_ETC=$WORK/etc-vibe-shim
    mv /etc/vibe-shim "$SAVED_ETC"
fi
if [ -e "$QS_BIN" ]; then
    SAVED_QS=$WORK/qs-vibe-shim
    mv "$QS_BIN" "$SAVED_QS"
fi
if [ -e /var/lib/vibe-shim ]; then
    SAVED_STATE=$WORK/var-lib-vibe-shim
    mv /var/lib/vibe-shim "$SAVED_STATE"
fi

dpkg -i "$deb"
[ -x "$BIN" ] || { echo "deb.sh: $BIN missing after dpkg -i" >&2; exit 1; }
"$BIN" policy check >/dev/null
grep -qx /etc/vibe-shim/config.toml /var/lib/dpkg/info/vibe-shim.conffiles
# dpkg -i changes no engine config.
diff <(snapshot | grep -E '^[0-9a-f]{64} +/etc/(docker|containerd|containers)/') \
    <(grep -E '^[0-9a-f]{64} +/etc/(docker|containerd|containers)/' "$WORK/before")

# Scratch copies of the host's engine configs (or stand-ins).
S=$WORK/scratch
mkdir -p "$S"
if [ -f /etc/docker/daemon.json ]; then cp /etc/docker/daemon.json "$S/daemon.json"; else
    printf '{\n  "log-driver": "json-file"\n}\n' >"$S/daemon.json"; fi
if [ -f /etc/containerd/config.toml ]; then cp /etc/containerd/config.toml "$S/config.toml"; else
    printf '# stand-in\nversion = 2\n' >"$S/config.toml"; fi
cp "$S/daemon.json" "$WORK/daemon.json.orig"
cp "$S/config.toml" "$WORK/config.toml.orig"

"$BIN" install docker --authz --daemon-json "$S/daemon.json"
"$BIN" install docker --authz --daemon-json "$S/daemon.json" | grep -q 'already configured'
jq -e '.runtimes["vibe-shim"].path == "/usr/bin/vibe-shim" and
    (.["authorization-plugins"] | index("vibe-shim"))' "$S/daemon.json" >/dev/null
"$BIN" install containerd --config "$S/config.toml"
grep -q 'BinaryName = "/usr/bin/vibe-shim"' "$S/config.toml"
"$BIN" install podman --config "$S/containers.conf.d/vibe-shim.conf"
grep -q 'vibe-shim = \["/usr/bin/vibe-shim"\]' "$S/containers.conf.d/vibe-shim.conf"
ls /var/lib/vibe-shim/installed/
# The last step of the production path: runc, as the engines find it, is
# now the packaged vibe-shim (the real runc still answers --version).
"$BIN" install lockdown
dpkg-divert --list /usr/sbin/runc | grep -q vibe-shim
[ "$(readlink -f /usr/sbin/runc)" = "$BIN" ] ||
    { echo "deb.sh: /usr/sbin/runc is not vibe-shim after install lockdown" >&2; exit 1; }
/usr/sbin/runc --version | grep -q '^runc version'

# Removal undoes the four installs (prerm), lockdown first: runc comes back
# byte for byte with no diversion left (the snapshot compares both).
dpkg -r "$PKG"
cmp "$S/daemon.json" "$WORK/daemon.json.orig"
cmp "$S/config.toml" "$WORK/config.toml.orig"
[ ! -e "$S/containers.conf.d" ] || { echo "deb.sh: podman drop-in left behind" >&2; exit 1; }
[ ! -e "$BIN" ] || { echo "deb.sh: $BIN left after dpkg -r" >&2; exit 1; }
dpkg -P "$PKG"
echo "-- dpkg -i, install docker --authz/containerd/podman/lockdown, dpkg -r, dpkg -P: done"

# ---- from the quick start to the package, and back ------------------------
# What quickstart.sh leaves: its binary, the policy (edited since), and a
# daemon.json entry naming that binary.
install -m 755 "$TARGET/release/vibe-shim" "$QS_BIN"
install -D -m 644 packaging/config.toml /etc/vibe-shim/config.toml
echo '# edited by the admin after the quick start' >>/etc/vibe-shim/config.toml
cp /etc/vibe-shim/config.toml "$WORK/edited.toml"
jq -n --arg p "$QS_BIN" '{runtimes: {"vibe-shim": {path: $p, runtimeArgs: ["--config", "/etc/vibe-shim/config.toml"]}}}' \
    >"$S/daemon.json"
cp "$S/daemon.json" "$WORK/daemon.json.qs"
# The move, as docs/admin/install.md gives it (non-interactive: no prompt).
DEBIAN_FRONTEND=noninteractive dpkg -i --force-confold "$deb" </dev/null
cmp /etc/vibe-shim/config.toml "$WORK/edited.toml" ||
    { echo "deb.sh: dpkg -i --force-confold did not keep the edited policy" >&2; exit 1; }
"$BIN" install docker --daemon-json "$S/daemon.json"
jq -e '.runtimes["vibe-shim"].path == "/usr/bin/vibe-shim"' "$S/daemon.json" >/dev/null ||
    { echo "deb.sh: install docker did not re-point the runtime at $BIN" >&2; exit 1; }
rm "$QS_BIN"
"$BIN" policy check >/dev/null
# And back: dpkg -r keeps the policy (a conffile) and puts the quick start's
# entry back; quickstart.sh then installs its binary again.
dpkg -r "$PKG"
cmp /etc/vibe-shim/config.toml "$WORK/edited.toml" ||
    { echo "deb.sh: dpkg -r did not keep the edited policy" >&2; exit 1; }
cmp "$S/daemon.json" "$WORK/daemon.json.qs" ||
    { echo "deb.sh: dpkg -r did not give the quick start's runtime entry back" >&2; exit 1; }
dpkg -P "$PKG"
rm -rf /etc/vibe-shim
echo "-- quick start -> dpkg -i --force-confold -> dpkg -r: the edited policy and the runtime entry kept"

restore_host
snapshot >"$WORK/after"
if ! diff -u "$WORK/before" "$WORK/after"; then
    echo "deb.sh: the host is not as found after dpkg -r / -P" >&2
    exit 1
fi
echo "-- the host is as found"
