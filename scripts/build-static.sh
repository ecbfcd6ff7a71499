#!/usr/bin/env bash
# Statically linked release binaries of handnode, one file to copy onto a box: x86_64 and the
# Raspberry Pis, cross-built on an x86_64 Debian-like host.
#
#   scripts/build-static.sh [--all]               the four release artifacts (the default)
#   scripts/build-static.sh --target TRIPLE ...   only these (repeatable)
#   scripts/build-static.sh --list                the targets and what each needs
#   options: --dist DIR   write artifacts there instead of <cargo target dir>/dist
#
#   arch     triple                          libc               runs on
#   x86_64   x86_64-unknown-linux-musl       musl               any x86_64 Linux
#   aarch64  aarch64-unknown-linux-musl      musl               64-bit Pi OS: Pi 3, 4, 5, Zero 2 W
#   armv7    armv7-unknown-linux-gnueabihf   glibc +crt-static  32-bit Pi OS: Pi 2, 3, 4, 5, Zero 2 W
#   armv6    arm-unknown-linux-gnueabi       glibc +crt-static  32-bit Pi OS: Pi 1, Zero, Zero W (any 32-bit Pi)
#   -        x86_64-unknown-linux-gnu        glibc +crt-static  not a release artifact (CI's DNS check)
#
# For each target: `rustup target add` (armv6: rustup serves no ARMv6 standard library, so
# `rustup component add rust-src`, and cargo's -Zbuild-std builds one), the Debian cross C
# compiler with apt (ring has C and assembly; as root or through `sudo -n`), `cargo build
# --release`, then `file` must say static and the right architecture, and the binary must run
# (under qemu-user, on the emulated CPU the table names). A release target is copied to DIST/handnode-<version>-<arch>, and
# DIST/SHA256SUMS is rewritten for this version's artifacts. A target that cannot be had (no
# standard library from rustup, no compiler from apt, a failed build) gets one line saying which
# and why, its stale artifact is removed, the others still build, and the exit status is 1.
# Every install step is skipped when already done. The details of each target:
# docs/install.md. `--libc gnu|musl` (older name) = --target x86_64-*.
set -euo pipefail

die() { echo "build-static: error: $*" >&2; exit 2; }
note() { echo "build-static: $*" >&2; }

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/ci/apt-lib.sh
. "$repo/scripts/ci/apt-lib.sh"

# The targets, declared once. Fields: triple, dist arch ("-": not a release artifact), libc,
# what `file` must say (ELF class and machine), Debian packages, commands they provide, the C
# compiler and archiver for ring (empty: the host's), the linker (empty: rustc's default), the
# qemu-user program that runs it on x86_64 (empty: runs natively), the CPU qemu emulates (empty:
# qemu's default, which has every feature; armv6: the Pi 1's ARM1176, on which an ARMv7
# instruction is illegal), where the standard library comes from (rustup, or build-std: built
# from its source).
targets_table() {
    cat <<'EOF'
x86_64-unknown-linux-musl|x86_64|musl|ELF 64-bit LSB,x86-64|musl-tools|musl-gcc|musl-gcc|||||rustup
aarch64-unknown-linux-musl|aarch64|musl|ELF 64-bit LSB,ARM aarch64|gcc-aarch64-linux-gnu libc6-dev-arm64-cross|aarch64-linux-gnu-gcc|aarch64-linux-gnu-gcc|aarch64-linux-gnu-ar|aarch64-linux-gnu-gcc|qemu-aarch64-static||rustup
armv7-unknown-linux-gnueabihf|armv7|glibc|ELF 32-bit LSB,ARM, EABI5|gcc-arm-linux-gnueabihf libc6-dev-armhf-cross|arm-linux-gnueabihf-gcc|arm-linux-gnueabihf-gcc|arm-linux-gnueabihf-ar|arm-linux-gnueabihf-gcc|qemu-arm-static||rustup
arm-unknown-linux-gnueabi|armv6|glibc|ELF 32-bit LSB,ARM, EABI5|gcc-arm-linux-gnueabi libc6-dev-armel-cross|arm-linux-gnueabi-gcc|arm-linux-gnueabi-gcc|arm-linux-gnueabi-ar|arm-linux-gnueabi-gcc|qemu-arm-static|arm1176|build-std
x86_64-unknown-linux-gnu|-|glibc|ELF 64-bit LSB,x86-64||||||||rustup
EOF
}
# The release set, in build order.
release_triples=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl armv7-unknown-linux-gnueabihf arm-unknown-linux-gnueabi)

# row TRIPLE : sets t_* (all but the triple) from the table; non-zero if the triple is not in it.
row() {
    local line
    line=$(targets_table | grep "^$1|") || return 1
    IFS='|' read -r _ t_arch t_libc t_file t_pkgs t_cmds t_cc t_ar t_linker t_runner t_cpu t_std <<<"$line"
}

requested=()
dist=
while [ $# -gt 0 ]; do
    case "$1" in
        --all) requested+=("${release_triples[@]}"); shift ;;
        --target) [ $# -ge 2 ] || die "--target needs a triple (see --list)"; requested+=("$2"); shift 2 ;;
        --target=*) requested+=("${1#--target=}"); shift ;;
        --dist) [ $# -ge 2 ] || die "--dist needs a directory"; dist=$2; shift 2 ;;
        --dist=*) dist=${1#--dist=}; shift ;;
        --libc) [ $# -ge 2 ] || die "--libc needs gnu or musl"; requested+=("x86_64-unknown-linux-$2"); shift 2 ;;
        --libc=*) requested+=("x86_64-unknown-linux-${1#--libc=}"); shift ;;
        --list)
            printf '%-30s %-7s %-5s %-19s %-8s %-9s %s\n' TRIPLE ARCH LIBC QEMU CPU STD "DEBIAN PACKAGES"
            targets_table | while IFS='|' read -r tr ar lc _ pk _ _ _ _ qe cpu sd; do
                printf '%-30s %-7s %-5s %-19s %-8s %-9s %s\n' "$tr" "$ar" "$lc" "${qe:--}" "${cpu:--}" "$sd" "${pk:--}"
            done
            exit 0 ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see scripts/build-static.sh --help)" ;;
    esac
done
[ ${#requested[@]} -gt 0 ] || requested=("${release_triples[@]}")
mapfile -t requested < <(printf '%s\n' "${requested[@]}" | awk '!seen[$0]++')
# Bad input changes nothing: every triple is checked before anything is installed or built.
for t in "${requested[@]}"; do
    row "$t" || die "'$t' is not a target this script builds; one of: $(targets_table | cut -d'|' -f1 | tr '\n' ' ')"
done

cd "$repo"
[ -z "${CARGO_ENCODED_RUSTFLAGS:-}" ] || die "CARGO_ENCODED_RUSTFLAGS is set and would replace +crt-static; unset it"
command -v cargo >/dev/null || die "cargo not found; install Rust from https://rustup.rs"
[ "$(uname -m)" = x86_64 ] || die "this script cross-builds on an x86_64 host and this one is $(uname -m); \
on a Raspberry Pi run scripts/install.sh, which builds there (see docs/install.md)"

# Where cargo puts its output (CARGO_TARGET_DIR and .cargo/config are honoured).
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target_dir" ] || die "could not learn cargo's target directory (cargo metadata failed)"
pkgid=$(cargo pkgid) || die "cargo pkgid failed"
version=${pkgid##*[#@]}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "could not read the version from cargo pkgid ($pkgid)"
dist=${dist:-$target_dir/dist}
case "$dist" in /*) ;; *) dist=$PWD/$dist ;; esac

# not_built TRIPLE WHY : the one line for a target that cannot be had; drops its old artifact.
not_built=()
not_built() {
    local old=
    if row "$1" && [ "$t_arch" != - ] && [ -e "$dist/handnode-$version-$t_arch" ]; then
        rm -f "$dist/handnode-$version-$t_arch"
        old=" (removed the older $dist/handnode-$version-$t_arch)"
    fi
    echo "build-static: $1: not built: $2$old" >&2
    not_built+=("$1")
}

# The first line of a tool's failure worth showing: apt's `E:`, rustup's `error:`, else the last.
why_of() {
    grep -m1 -E '^(E|error|sudo):' "$1" 2>/dev/null || tail -n 1 "$1"
}

# have_std LOG TRIPLE : the standard library for TRIPLE is installed, or rustup installs it
# (for a build-std target: the standard library's source, which cargo then builds).
have_std() {
    local log=$1.rustup
    if [ "$t_std" = build-std ]; then
        [ -f "$(rustc --print sysroot)/lib/rustlib/src/rust/library/Cargo.lock" ] && return 0
        if command -v rustup >/dev/null; then
            note "rustup component add rust-src (rustup serves no standard library for $2; cargo builds one)"
            rustup component add rust-src >"$log" 2>&1 && return 0
            why="rustup serves no standard library for it and cannot install rust-src to build one ($(why_of "$log"))"
        else
            why="rustup serves no standard library for it, and building one needs rustup's rust-src (https://rustup.rs)"
        fi
        return 1
    fi
    if command -v rustup >/dev/null; then
        rustup target list --installed 2>/dev/null | grep -qx "$2" && return 0
        note "rustup target add $2"
        rustup target add "$2" >"$log" 2>&1 && return 0
        why="rustup cannot install its standard library ($(why_of "$log"))"
    else
        [ -d "$(rustc --print target-libdir --target "$2" 2>/dev/null)" ] && return 0
        why="this toolchain has no standard library for it and rustup is not installed (https://rustup.rs)"
    fi
    return 1
}

# have_tools : the target's commands exist and (on Debian) its packages are installed, or
# apt-get installs them.
have_tools() {
    local log=$1.apt missing=() p c
    [ -n "$t_pkgs" ] || return 0
    for c in $t_cmds; do command -v "$c" >/dev/null || missing=("$t_pkgs"); done
    if command -v dpkg-query >/dev/null; then
        for p in $t_pkgs; do
            dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing=("$t_pkgs")
        done
    fi
    [ ${#missing[@]} -gt 0 ] || return 0
    if ! command -v apt-get >/dev/null; then
        why="needs a C cross compiler ($t_cmds) and this is not a Debian-like system to apt-get install $t_pkgs"
        return 1
    fi
    note "apt-get install $t_pkgs"
    # shellcheck disable=SC2086 # one word per package
    if { DEBIAN_FRONTEND=noninteractive as_root apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends $t_pkgs; } >"$log" 2>&1; then
        return 0
    fi
    why="apt-get install $t_pkgs failed ($(why_of "$log"))"
    return 1
}

# Upper case with underscores, as cargo's and cc's environment variables spell a triple.
env_name() { tr 'a-z-' 'A-Z_' <<<"$1"; }

# check_file BIN : `file` says static and the target's ELF class and machine.
check_file() {
    local what pat pats
    what=$(file -b "$1")
    echo "file: $what"
    case "$what" in
        *"statically linked"*|*"static-pie linked"*) ;;
        *) why="not statically linked (file says: $what)"; return 1 ;;
    esac
    IFS=, read -r -a pats <<<"$t_file"
    # "ARM, EABI5" holds a comma: rejoin everything after the ELF class.
    pat=$(IFS=,; echo "${pats[*]:1}")
    case "$what" in
        "${pats[0]}"*"$pat"*) ;;
        *) why="not a ${pats[0]} $pat binary (file says: $what)"; return 1 ;;
    esac
    # armv7: the hard-float ARMv7 ABI that 32-bit Pi OS (armhf) runs, not ARMv6.
    if [ "$t_arch" = armv7 ]; then
        local attrs
        attrs=$(arm-linux-gnueabihf-readelf -A "$1" 2>/dev/null || true)
        grep -q 'Tag_CPU_arch: v7' <<<"$attrs" && grep -q 'Tag_ABI_VFP_args: VFP registers' <<<"$attrs" \
            || { why="readelf -A does not show ARMv7 with VFP argument registers"; return 1; }
        echo "abi: ARMv7, hard float (readelf -A)"
    fi
    # armv6: the soft-float EABI, which a static binary may use on any ARM Linux. Its
    # attributes say v7 because ring's NEON code (chosen at run time) is in it, so whether it
    # runs on ARMv6 is run_check's question, asked of an emulated ARM1176.
    if [ "$t_arch" = armv6 ]; then
        arm-linux-gnueabi-readelf -h "$1" 2>/dev/null | grep -q 'Version5 EABI, soft-float ABI' \
            || { why="readelf -h does not show the soft-float EABI5"; return 1; }
        echo "abi: EABI5, soft float (readelf -h)"
    fi
}

# run_check BIN : starts it (natively, or under qemu-user when installed), `--version`.
run_check() {
    local runner=() out
    [ -z "$t_runner" ] || runner=("$t_runner")
    if [ ${#runner[@]} -gt 0 ] && ! command -v "${runner[0]}" >/dev/null; then
        echo "runs: not tried (${runner[0]} is not installed: apt-get install qemu-user-static)"
        return 0
    fi
    [ -z "$t_cpu" ] || runner+=(-cpu "$t_cpu")
    out=$("${runner[@]}" "$1" --version 2>&1) || { why="$1 --version failed${t_cpu:+ on an emulated $t_cpu}: $out"; return 1; }
    echo "runs: ${runner[*]:+${runner[*]} }--version -> $out"
}

mib() { awk -v s="$1" 'BEGIN { printf "%.2f MiB", s / 1048576 }'; }

command -v file >/dev/null || { note "apt-get install file"; as_root apt-get install -y -qq file >/dev/null 2>&1; } \
    || die "'file' is not installed and apt-get could not install it"
mkdir -p "$target_dir/tmp"
scratch=$(mktemp -d "$target_dir/tmp/build-static.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

built=()
for triple in "${requested[@]}"; do
    row "$triple"
    why=
    echo "== $triple"
    if ! have_std "$scratch/$triple" "$triple"; then not_built "$triple" "$why"; continue; fi
    if ! have_tools "$scratch/$triple"; then not_built "$triple" "$why"; continue; fi
    E=$(env_name "$triple")
    u=${triple//-/_}
    build_env=()
    [ -z "$t_cc" ] || build_env+=("CC_$u=$(printenv "CC_$u" || echo "$t_cc")")
    [ -z "$t_ar" ] || build_env+=("AR_$u=$(printenv "AR_$u" || echo "$t_ar")")
    [ -z "$t_linker" ] || build_env+=("CARGO_TARGET_${E}_LINKER=$(printenv "CARGO_TARGET_${E}_LINKER" || echo "$t_linker")")
    std_args=()
    # -Zbuild-std is unstable: RUSTC_BOOTSTRAP lets this stable toolchain use it, as the fuzz
    # targets do. panic_unwind: a panic in one call must unwind, not abort the daemon.
    # Its own target dir, too: RUSTC_BOOTSTRAP changes what some build scripts of the host
    # (proc-macro2's) print, and in the shared dir that rebuilt the other targets' artifacts
    # with different bytes on their next, otherwise no-op, build.
    tdir=$target_dir
    [ "$t_std" != build-std ] || {
        build_env+=(RUSTC_BOOTSTRAP=1 "CARGO_TARGET_DIR=$target_dir/build-std")
        std_args=("-Zbuild-std=std,panic_unwind")
        tdir=$target_dir/build-std
    }
    note "cargo build --release --target $triple${std_args[*]:+ ${std_args[*]}} (${build_env[*]:-host cc}, +crt-static) ..."
    start=$(date +%s)
    # With an explicit --target, RUSTFLAGS reaches only the target's artifacts: build scripts
    # and proc-macros stay host programs. +crt-static is musl's default and glibc's opt-in.
    if ! env "${build_env[@]}" RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
        cargo build --release --locked --target "$triple" "${std_args[@]}" --bin handnode >"$scratch/$triple.cargo" 2>&1; then
        cat "$scratch/$triple.cargo" >&2
        not_built "$triple" "cargo build failed (its output is above; last line: $(tail -n 1 "$scratch/$triple.cargo"))"
        continue
    fi
    grep -E '^(warning|error)' "$scratch/$triple.cargo" >&2 || true
    secs=$(($(date +%s) - start))
    bin=$tdir/$triple/release/handnode
    size=$(stat -c %s "$bin")
    echo "path: $bin"
    echo "built in: ${secs} s"
    echo "size: $size bytes ($(mib "$size"))"
    if ! check_file "$bin" || ! run_check "$bin"; then not_built "$triple" "$why"; continue; fi
    if [ "$t_arch" != - ]; then
        mkdir -p "$dist"
        out=$dist/handnode-$version-$t_arch
        cp "$bin" "$out.tmp"
        mv -f "$out.tmp" "$out"
        echo "dist: $out"
    fi
    built+=("$triple")
done

# SHA256SUMS lists exactly this version's artifacts; other versions' are removed. A run of
# non-release targets only leaves the dist dir alone.
touches_dist=0
for triple in "${requested[@]}"; do row "$triple"; [ "$t_arch" = - ] || touches_dist=1; done
[ "$touches_dist" = 0 ] || for f in "$dist"/handnode-*; do
    [ -e "$f" ] || continue
    case "$(basename "$f")" in
        "handnode-$version-"*) ;;
        *) rm -f "$f"; note "removed $f (another version)" ;;
    esac
done
[ "$touches_dist" = 0 ] || (
    cd "$dist" 2>/dev/null || exit 0
    shopt -s nullglob
    files=("handnode-$version-"*)
    if [ ${#files[@]} -gt 0 ]; then
        sha256sum "${files[@]}" >SHA256SUMS.tmp && mv -f SHA256SUMS.tmp SHA256SUMS
    else
        rm -f SHA256SUMS
    fi
)

echo "== sizes"
host_bin=$target_dir/release/handnode
if [ -x "$host_bin" ]; then
    printf '%-58s %9s bytes  %s\n' "host build (dynamic glibc, release/handnode)" \
        "$(stat -c %s "$host_bin")" "$(mib "$(stat -c %s "$host_bin")")"
else
    printf '%-58s %s\n' "host build" "not built (cargo build --release)"
fi
for triple in "${built[@]}"; do
    row "$triple"
    b=$target_dir/$triple/release/handnode label="$triple/release/handnode"
    [ "$t_arch" = - ] || { b=$dist/handnode-$version-$t_arch; label=$(basename "$b"); }
    printf '%-58s %9s bytes  %s\n' "$label ($t_libc, static)" "$(stat -c %s "$b")" "$(mib "$(stat -c %s "$b")")"
done
if [ "$touches_dist" = 1 ] && [ -f "$dist/SHA256SUMS" ]; then
    echo "== $dist/SHA256SUMS"
    cat "$dist/SHA256SUMS"
fi
if [ ${#not_built[@]} -gt 0 ]; then
    note "built ${#built[@]} of ${#requested[@]}; not built: ${not_built[*]}"
    exit 1
fi
note "built ${#built[@]} of ${#requested[@]}"
