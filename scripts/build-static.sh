#!/usr/bin/env bash
# Build a statically linked x86_64 release binary of handnode: one file to copy onto a box.
#
#   scripts/build-static.sh [--libc gnu|musl|all]
#
#   gnu   glibc with -C target-feature=+crt-static (what CI builds; always available on a
#         glibc host). Output: target/x86_64-unknown-linux-gnu/release/handnode
#   musl  needs `rustup target add x86_64-unknown-linux-musl` (and, for ring's C code,
#         `apt-get install musl-tools`). Output: target/x86_64-unknown-linux-musl/release/handnode
#   all   (default) gnu, then musl if that target is installed (a note if it is not)
#
# For each binary it prints the path, the size and what `file` says, checks that it is
# static and that it starts (`--version`), and exits non-zero with the reason otherwise.
# Building on a Raspberry Pi or cross-building for ARM: see docs/install.md.
set -euo pipefail

die() { echo "build-static: error: $*" >&2; exit 1; }
note() { echo "build-static: $*" >&2; }

libc=all
while [ $# -gt 0 ]; do
    case "$1" in
        --libc) [ $# -ge 2 ] || die "--libc needs gnu, musl or all"; libc=$2; shift 2 ;;
        --libc=*) libc=${1#--libc=}; shift ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (usage: scripts/build-static.sh [--libc gnu|musl|all])" ;;
    esac
done
case "$libc" in gnu|musl|all) ;; *) die "--libc must be gnu, musl or all, not '$libc'" ;; esac

cd "$(dirname "$0")/.."
[ -z "${CARGO_ENCODED_RUSTFLAGS:-}" ] || die "CARGO_ENCODED_RUSTFLAGS is set and would replace +crt-static; unset it"
[ -f Cargo.toml ] || die "run from a handnode checkout (no Cargo.toml next to scripts/)"
command -v cargo >/dev/null || die "cargo not found; install Rust from https://rustup.rs"
command -v file >/dev/null || die "'file' not found; apt-get install file"
[ "$(uname -m)" = x86_64 ] || die "this script builds x86_64 binaries and this host is $(uname -m); \
on a Raspberry Pi run 'cargo build --release' (see docs/install.md)"

# Where cargo puts its output (CARGO_TARGET_DIR and .cargo/config are honoured).
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target_dir" ] || die "could not learn cargo's target directory (cargo metadata failed)"

installed_targets() {
    if command -v rustup >/dev/null; then rustup target list --installed; else rustc -vV | sed -n 's/^host: //p'; fi
}

# With an explicit --target, RUSTFLAGS reaches only target artifacts: build scripts and
# proc-macros stay dynamic host programs, and only the handnode binary gets +crt-static.
build_one() {
    local triple=$1
    note "building $triple (release, +crt-static) ..."
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
        cargo build --release --locked --target "$triple" --bin handnode >&2 \
        || die "cargo build for $triple failed (output above)"
    local bin=$target_dir/$triple/release/handnode
    [ -x "$bin" ] || die "cargo succeeded but $bin is missing"
    local what size
    what=$(file -b "$bin")
    size=$(stat -c %s "$bin")
    echo "path: $bin"
    echo "size: $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1048576 }') MiB)"
    echo "file: $what"
    case "$what" in
        *"statically linked"*|*"static-pie linked"*) ;;
        *) die "$bin is not statically linked (file says: $what)" ;;
    esac
    local out
    out=$("$bin" --version 2>&1) || die "$bin --version failed: $out"
    echo "runs: --version -> ${out:-<no output>}"
}

targets=$(installed_targets)
has_target() { grep -qx "$1" <<<"$targets"; }

if [ "$libc" = gnu ] || [ "$libc" = all ]; then
    has_target x86_64-unknown-linux-gnu || die "target x86_64-unknown-linux-gnu is not installed \
(rustup target add x86_64-unknown-linux-gnu)"
    build_one x86_64-unknown-linux-gnu
fi
if [ "$libc" = musl ] || [ "$libc" = all ]; then
    if has_target x86_64-unknown-linux-musl; then
        command -v musl-gcc >/dev/null || command -v x86_64-linux-musl-gcc >/dev/null \
            || note "warning: no musl-gcc; ring's C code will be built with the host cc \
(apt-get install musl-tools if the build or the binary fails)"
        build_one x86_64-unknown-linux-musl
    elif [ "$libc" = musl ]; then
        die "target x86_64-unknown-linux-musl is not installed \
(rustup target add x86_64-unknown-linux-musl; apt-get install musl-tools)"
    else
        note "musl skipped: x86_64-unknown-linux-musl is not installed \
(rustup target add x86_64-unknown-linux-musl to build it too)"
    fi
fi
