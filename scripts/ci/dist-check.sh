#!/usr/bin/env bash
# CI test of the release artifacts (issue 17), run by scripts/test.sh:
#   1. scripts/build-static.sh --all: the four static binaries, their `file` lines, their
#      sizes beside the host build's, target/dist/SHA256SUMS;
#   2. per artifact: `doctor --json` reports the target, libc and static build it was made as,
#      and scripts/e2e.sh passes against it (start, /healthz, first-start token, owner /mcp
#      bash, a grant attached to the websocat pod, revoke): aarch64, armv7 and armv6 under
#      qemu-user (armv6 on an emulated ARM1176, the Pi 1's and Zero's core), x86_64 natively;
#   3. the README's copy (a tarball of install.sh, contrib/systemd and target/dist) unpacked
#      elsewhere: install.sh --from-dist into a temp prefix installs this host's artifact, and
#      refuses it with one byte changed, changing nothing;
#   4. a target that cannot be had (a rustup that cannot install it) is one line and the
#      others still build.
#
#   scripts/ci/dist-check.sh
#
# Installs qemu-user-static with apt if missing (build-static.sh installs the cross compilers).
# Prints how long each part took. Exits non-zero with a message on the first failure.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
# shellcheck source=scripts/ci/apt-lib.sh
. "$repo/scripts/ci/apt-lib.sh"

fail() { echo "dist-check: FAIL: $*" >&2; exit 1; }
ok() { echo "dist-check: ok: $*"; }
now() { date +%s; }
t0=$(now)

command -v qemu-aarch64-static >/dev/null && command -v qemu-arm-static >/dev/null \
    || apt_install dist-check qemu-user-static || fail "apt-get install qemu-user-static"
command -v jq >/dev/null || apt_install dist-check jq || fail "apt-get install jq"

# The host build, for the size comparison (already built by scripts/e2e.sh in a full run).
cargo build --release --locked --quiet --bin handnode || fail "cargo build --release"

# --- 1. build ----------------------------------------------------------------------------
t=$(now)
scripts/build-static.sh --all || fail "scripts/build-static.sh --all"
build_secs=$(($(now) - t))
dist=$repo/target/dist
[ -f "$dist/SHA256SUMS" ] || fail "no $dist/SHA256SUMS"
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match the artifacts"

# The release rows of build-static.sh's own table: TRIPLE ARCH LIBC QEMU CPU.
mapfile -t rows < <(scripts/build-static.sh --list | awk 'NR > 1 && $2 != "-" { print $1, $2, $3, $4, $5 }')
[ ${#rows[@]} -eq 4 ] || fail "build-static.sh --list shows ${#rows[@]} release targets, want 4"
artifact_of() {
    local name
    name=$(sed -nE "s/^[0-9a-f]{64} [ *](handnode-[^ ]+-$1)\$/\1/p" "$dist/SHA256SUMS")
    [ -n "$name" ] && [ -f "$dist/$name" ] || fail "SHA256SUMS lists no artifact for $1"
    echo "$dist/$name"
}
ok "built $(wc -l <"$dist/SHA256SUMS") artifacts in ${build_secs} s"

# --- 2. each artifact: what it says it is, and the end-to-end run ------------------------
t=$(now)
e2e_times=()
for r in "${rows[@]}"; do
    read -r triple arch libc qemu cpu <<<"$r"
    bin=$(artifact_of "$arch")
    runner=()
    [ "$qemu" = - ] || runner=("$qemu")
    # qemu-user reads its -cpu from QEMU_CPU, which reaches it through scripts/e2e.sh too.
    if [ "$cpu" = - ]; then unset QEMU_CPU; else export QEMU_CPU=$cpu; qemu="$qemu on $cpu"; fi
    build=$("${runner[@]}" "$bin" doctor --json | jq -c .build) || fail "$bin doctor --json"
    want=$(jq -cn --arg t "$triple" --arg l "$libc" '{libc: $l, static: true, target: $t}')
    [ "$(jq -cS . <<<"$build")" = "$want" ] || fail "$arch: doctor reports $build, want $want"
    ok "$arch: doctor --json reports $build${runner:+ (under $qemu)}"
    te=$(now)
    log=$repo/target/tmp/dist-e2e-$arch.log
    mkdir -p "$(dirname "$log")"
    if ! HANDNODE_BIN=$bin HANDNODE_RUNNER=${runner[0]:-} RUST_LOG=info bash scripts/e2e.sh >"$log" 2>&1; then
        grep -v '^PASS' "$log" >&2
        fail "$arch: scripts/e2e.sh${runner:+ under $qemu} (log: $log)"
    fi
    e2e_times+=("$arch $(($(now) - te)) s")
    ok "$arch: scripts/e2e.sh${runner:+ under $qemu}: $(tail -n 1 "$log")"
done
unset QEMU_CPU
e2e_secs=$(($(now) - t))
# The CPU armv6 was emulated on (build-static.sh's table names it) is what proves it runs on
# ARMv6: that CPU must refuse an ARMv7 binary.
armv6_cpu=$(printf '%s\n' "${rows[@]}" | awk '$2 == "armv6" { print $5 }')
[ -n "$armv6_cpu" ] && [ "$armv6_cpu" != - ] || fail "build-static.sh --list names no CPU to emulate for armv6"
armv7_bin=$(artifact_of armv7)
rc=0
# In a group, so bash's own "Illegal instruction" report goes to /dev/null with the rest.
{ QEMU_CPU=$armv6_cpu qemu-arm-static "$armv7_bin" --version; } >/dev/null 2>&1 || rc=$?
[ "$rc" = 132 ] || fail "the armv7 artifact on an emulated $armv6_cpu exited $rc, want 132 (SIGILL): \
that CPU must refuse ARMv7 code for the armv6 run to prove anything"
ok "the armv7 artifact dies with SIGILL on an emulated $armv6_cpu; armv6 passed the e2e there"

# --- 3. install.sh --from-dist ------------------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup} CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
home=$tmp/home
mkdir -p "$home"
in_home() {
    env HOME="$home" XDG_CONFIG_HOME="$home/.config" XDG_DATA_HOME="$home/.local/share" \
        XDG_STATE_HOME="$home/.local/state" "$@"
}
snapshot() { (cd "$tmp" && find . -path ./fake -prune -o -type f -print0 | sort -z | xargs -0r sha256sum); }
prefix=$tmp/prefix
case "$(uname -m)" in x86_64) host_arch=x86_64 ;; *) fail "this check runs on x86_64, not $(uname -m)" ;; esac
host_artifact=$(artifact_of "$host_arch")

# As README's "Install on a Pi" has it: the tarball, unpacked elsewhere, installs from its
# own target/dist with its own install.sh.
tar czf "$tmp/handnode-dist.tgz" scripts/install.sh contrib/systemd target/dist
unpack() { rm -rf "$tmp/pi" && mkdir -p "$tmp/pi" && tar xzf "$tmp/handnode-dist.tgz" -C "$tmp/pi"; }
pi_install() { (cd "$tmp/pi" && in_home scripts/install.sh --prefix "$prefix" --from-dist target/dist); }

# One byte of this host's artifact changed: refused, nothing changed.
unpack
victim=$tmp/pi/target/dist/$(basename "$host_artifact")
offset=$(($(stat -c %s "$victim") / 2))
byte=$(od -An -tu1 -j "$offset" -N1 "$victim" | tr -d ' ')
printf '%b' "\\$(printf '%03o' $(((byte + 1) % 256)))" | dd of="$victim" bs=1 seek="$offset" conv=notrunc status=none
cmp -s "$victim" "$host_artifact" && fail "the tampered copy is identical to the artifact"
before=$(snapshot)
if out=$(pi_install 2>&1); then
    fail "install.sh --from-dist accepted an artifact with one byte changed: $out"
fi
grep -q "does not match its SHA256SUMS entry" <<<"$out" || fail "the refusal does not say why: $out"
[ "$before" = "$(snapshot)" ] && [ ! -e "$prefix" ] || fail "the refused install changed files"
ok "install.sh --from-dist refuses $(basename "$victim") with byte $offset changed: $out"

unpack
out=$(pi_install) || fail "install.sh --from-dist: $out"
echo "$out" | sed 's/^/    /'
cmp -s "$prefix/bin/handnode" "$host_artifact" || fail "$prefix/bin/handnode is not $host_artifact"
"$prefix/bin/handnode" --version >/dev/null || fail "the installed binary does not run"
ok "install.sh --from-dist installed $(basename "$host_artifact") into a temp prefix from the unpacked tarball"

# --- 4. a target that cannot be had --------------------------------------------------------
# A rustup that has not installed aarch64-unknown-linux-musl and cannot download it; the
# x86_64 artifact is already built, so its build is cargo's no-op.
mkdir -p "$tmp/fake"
real_rustup=$(command -v rustup) || fail "rustup not found"
cat >"$tmp/fake/rustup" <<EOF
#!/bin/sh
case "\$*" in
    "target list --installed") "$real_rustup" target list --installed | grep -vx aarch64-unknown-linux-musl ;;
    "target add aarch64-unknown-linux-musl")
        echo "info: downloading component 'rust-std'" >&2
        echo "error: component download failed for rust-std-aarch64-unknown-linux-musl" >&2
        exit 1 ;;
    *) exec "$real_rustup" "\$@" ;;
esac
EOF
chmod +x "$tmp/fake/rustup"
mkdir -p "$tmp/dist2"
# An artifact of an earlier run, which must not outlive a failed one.
stale=$tmp/dist2/$(basename "$host_artifact" | sed -E 's/-x86_64$/-aarch64/')
touch "$stale"
rc=0
PATH=$tmp/fake:$PATH scripts/build-static.sh --dist "$tmp/dist2" --target aarch64-unknown-linux-musl \
    --target x86_64-unknown-linux-musl >"$tmp/na.out" 2>"$tmp/na.err" || rc=$?
[ "$rc" = 1 ] || fail "build-static.sh with an unavailable target exited $rc, want 1: $(cat "$tmp/na.err")"
line=$(grep 'aarch64-unknown-linux-musl: not built:' "$tmp/na.err") || fail "no 'not built' line: $(cat "$tmp/na.err")"
[ "$(wc -l <<<"$line")" = 1 ] || fail "more than one line about the unavailable target: $line"
grep -q 'rustup cannot install its standard library (error: component download failed' <<<"$line" \
    || fail "the line does not say why: $line"
[ "$(sed -E 's/^[0-9a-f]{64} [ *]//' "$tmp/dist2/SHA256SUMS")" = "$(basename "$host_artifact")" ] \
    || fail "SHA256SUMS of the partial run: $(cat "$tmp/dist2/SHA256SUMS")"
cmp -s "$tmp/dist2/$(basename "$host_artifact")" "$host_artifact" || fail "x86_64 was not built alongside"
[ ! -e "$stale" ] && grep -qF "(removed the older $stale)" <<<"$line" || fail "the stale $stale was not removed"
ok "an unavailable target is one line and the others still build: $line"

echo "dist-check: timings: build-static.sh --all ${build_secs} s; e2e ${e2e_secs} s (${e2e_times[*]}); total $(($(now) - t0)) s"
echo "dist-check: all passed"
