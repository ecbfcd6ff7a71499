#!/usr/bin/env bash
# Record link/startup.order: the functions the release daemon runs from main to idle.
#
#   scripts/order-file.sh [--check]
#
# Builds the release binary with symbols (same symbol names as the stripped one), runs it
# under valgrind's callgrind from start to ready, answers /readyz and /healthz, stops it
# with SIGTERM, and writes every function of the binary that ran, one mangled name per
# line. build.rs hands the file to the linker (--symbol-ordering-file), which puts those
# functions together at the start of .text, so an idle daemon keeps a few hundred KiB of
# code resident instead of nearly all of it (issue 5, rss_idle_kib; docs/performance.md).
#
# Re-run it after changing what runs at start-up, after a dependency or toolchain update
# (both change symbol names, and any code change can renumber LLVM's local copies such as
# `name.1490`), and commit the result. --check only reports how many of the recorded names
# the current build still has, and exits 1 if any is missing.
# Needs valgrind (apt-get install valgrind) and curl.
set -euo pipefail

die() { echo "order-file: error: $*" >&2; exit 1; }
note() { echo "order-file: $*" >&2; }

check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (usage: scripts/order-file.sh [--check])" ;;
esac

cd "$(dirname "$0")/.."
out=link/startup.order
target_dir=$PWD/target/order-file

# The map and the symbols must be those of the binary `cargo build --release` ships. Two
# ways of getting them change the code: RUSTFLAGS rebuild every dependency under other file
# names, which renumbers LLVM's local copies (`name.1490`), and the profile's `strip` is part
# of cargo's metadata hash, which renames everything. `cargo rustc -- ARGS` hands ARGS to the
# final link only: the dependencies are the shipped ones and `-C strip=none` overrides the
# profile's strip without touching the hash. The result is the shipped binary plus a symbol
# table (the same .text byte for byte), so callgrind sees the exact shipped names.
map=$target_dir/handnode.map
note "building the release binary with symbols and a linker map into $target_dir/map ..."
CARGO_TARGET_DIR=$target_dir/map cargo rustc --release --bin handnode -- \
    -C strip=none -C link-arg=-Wl,-Map="$map" >&2 || die "cargo rustc failed (output above)"
bin=$target_dir/map/release/handnode
symbols=$(mktemp)
trap 'rm -f "$symbols"' EXIT
# A function's section is .text.<symbol>, or .text.unlikely.<symbol> for one LLVM deems
# cold (those were the ones left scattered over the text).
sed -n 's/.*:(\.text\.\([^)]*\))$/\1/p' "$map" \
    | sed -E 's/^(unlikely|hot|startup|exit|split)\.//' | sort -u >"$symbols"
[ -s "$symbols" ] || die "no function sections in $map"

if [ "$check" = 1 ]; then
    [ -f "$out" ] || die "$out does not exist; run scripts/order-file.sh"
    total=$(grep -vc '^#' "$out" || true)
    found=$(grep -v '^#' "$out" | sort -u | comm -12 - "$symbols" | wc -l)
    note "$found of $total recorded names are in the current build"
    # Every miss counts: one startup function left out of the block can map a whole folio
    # of cold text (44 misses of 1 451 cost 0.5 MiB of idle RSS).
    if [ "$found" -lt "$total" ] || [ "$total" -eq 0 ]; then
        grep -v '^#' "$out" | sort -u | comm -23 - "$symbols" | head -5 | sed 's/^/  missing: /' >&2
        die "the order file is stale; re-run scripts/order-file.sh and commit it"
    fi
    exit 0
fi

command -v valgrind >/dev/null || die "valgrind not found; apt-get install valgrind"
command -v curl >/dev/null || die "curl not found; apt-get install curl"
work=$(mktemp -d)
trap '[ -n "${KEEP_WORK:-}" ] && echo "order-file: kept $work" >&2 || rm -rf "$work" "$symbols"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
note "running it under callgrind on 127.0.0.1:$port ..."
HANDNODE_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n') \
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/cg.out" \
    "$bin" --listen "127.0.0.1:$port" --state-dir "$work/state" --config-dir "$work/config" \
    --no-notify --no-sd-notify --display-backend none 2>"$work/log" &
pid=$!
for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || die "the daemon exited at start: $(tail -5 "$work/log")"
    sleep 0.1
done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || die "the daemon never became ready"
curl -sf "http://127.0.0.1:$port/healthz" >/dev/null || die "/healthz failed"
kill -TERM "$pid"
wait "$pid" || die "the daemon did not exit cleanly: $(tail -5 "$work/log")"

# callgrind names each function once as "fn=(id) name" and then by "(id)"; keep the
# names of functions that ran inside the binary itself (ob= is the object). A recursive
# call is named "name'2"; addresses without a symbol (PLT stubs) match no section.
{
    echo "# Functions the release daemon runs from main to idle (scripts/order-file.sh),"
    echo "# placed first in .text by the linker (build.rs). Regenerate after start-up"
    echo "# changes or dependency/toolchain updates; stale names are skipped by the linker."
    awk -v bin="$bin" '
        /^ob=\(/ { id = $1; sub(/^ob=/, "", id); if (NF > 1) { name = $0; sub(/^ob=\([0-9]+\) /, "", name); obs[id] = name } cur = obs[id]; next }
        /^c?ob=\(/ { id = $1; sub(/^cob=/, "", id); if (NF > 1) { name = $0; sub(/^cob=\([0-9]+\) /, "", name); obs[id] = name } next }
        /^c?fn=\(/ {
            split($1, a, "="); id = a[2]
            if (NF > 1) { name = $0; sub(/^c?fn=\([0-9]+\) /, "", name); fns[id] = name }
            if ($1 ~ /^fn=/ && cur == bin) print fns[id]
        }
    ' "$work/cg.out" | sed "s/'[0-9]*\$//" | sort -u | comm -12 - "$symbols"
} >"$out.tmp"
mv "$out.tmp" "$out"
note "wrote $out: $(grep -vc '^#' "$out") functions"
