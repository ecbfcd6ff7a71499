#!/usr/bin/env bash
# Run every cargo-fuzz target in fuzz/ for SECONDS each (default 60), one per core at a time,
# and print executions and findings per target. Exit 1 if any target found a crash (its
# input is saved under fuzz/artifacts/<target>/; turn it into a regression test).
#
#   bash scripts/fuzz.sh 60          # what CI runs
#   bash scripts/fuzz.sh 600 mcp_dispatcher   # one target, longer
#
# cargo-fuzz needs nightly-only rustc flags (-Zsanitizer=address, coverage instrumentation).
# On a stable toolchain this script sets RUSTC_BOOTSTRAP=1, which unlocks them; no other
# toolchain is downloaded. It installs cargo-fuzz with `cargo install` when missing, and
# needs a C++ compiler (libfuzzer-sys builds libFuzzer from source).
set -euo pipefail

secs="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz"

missing() {
    echo "fuzz.sh: cannot fuzz: $*" >&2
    exit 2
}

command -v cargo >/dev/null 2>&1 || missing "cargo is not installed (install Rust with rustup)"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz (cargo install cargo-fuzz --locked; about 2 minutes)"
    cargo install cargo-fuzz --locked --quiet ||
        missing "cargo install cargo-fuzz failed (needs crates.io); install it by hand"
fi
if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "fuzz.sh: installing g++ (libFuzzer is built from C++ source)"
        (apt-get update -qq && apt-get install -y -qq g++ >/dev/null) ||
            missing "no C++ compiler and apt-get install g++ failed"
    else
        missing "no C++ compiler (c++, g++ or clang++): install g++"
    fi
fi
if ! rustc --version | grep -q nightly; then
    # Stable rustc refuses -Z flags unless told this is a bootstrap build.
    export RUSTC_BOOTSTRAP=1
fi
sysroot="$(rustc --print sysroot)"
if ! ls "$sysroot"/lib/rustlib/*/lib/librustc-*_rt.asan.a >/dev/null 2>&1; then
    missing "this Rust toolchain ships no AddressSanitizer runtime (librustc-*_rt.asan.a)"
fi

if [ "$#" -gt 0 ]; then
    targets="$*"
else
    targets="$(cargo fuzz list)"
fi

# -O: optimised; -a: keep debug assertions and overflow checks (they find bugs too).
build_started=$(date +%s)
cargo fuzz build -O -a >/dev/null 2>build.log || { tail -30 build.log >&2; missing "cargo fuzz build failed (see above)"; }
echo "fuzz.sh: built $(echo $targets | wc -w) targets in $(($(date +%s) - build_started)) s"

# One target's run: its line of the summary into artifacts/<t>/last-run.line, exit 1 on a
# crash. Targets run side by side, one per core (FUZZ_JOBS to change): each still gets its
# SECONDS of one core, so the coverage is the same and the step takes a fraction as long.
run_target() {
    local t=$1 rc runs cov corpus verdict crash
    mkdir -p "corpus/$t" "artifacts/$t"
    local seeds=()
    [ -d "seeds/$t" ] && seeds=("seeds/$t")
    local log="artifacts/$t/last-run.log"
    set +e
    cargo fuzz run -O -a "$t" "corpus/$t" "${seeds[@]}" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1
    rc=$?
    set -e
    # A log without a figure (a crash at start) is no reason to stop: `|| true` throughout.
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1) || true
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+') || true
    corpus=$(find "corpus/$t" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
        verdict="no crash"
    else
        crash=$(grep -oE "artifacts/$t/[a-z]+-[0-9a-f]+" "$log" | head -1) || true
        verdict="CRASH (exit $rc) ${crash:-see $log}"
    fi
    printf '%-16s %12s execs  cov %6s  corpus %5s  %s\n' "$t" "${runs:-?}" "${cov:-?}" "$corpus" "$verdict" \
        >"artifacts/$t/last-run.line"
    if [ "$rc" -ne 0 ]; then
        { grep -E "panicked at|ERROR: AddressSanitizer|ERROR: libFuzzer|SUMMARY" "$log" || true; } \
            | head -5 | sed 's/^/    /' >>"artifacts/$t/last-run.line"
        return 1
    fi
}

jobs_max=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs_max" -ge 1 ] 2>/dev/null || jobs_max=1
echo "fuzz.sh: ${secs}s per target, $jobs_max at a time"
fuzz_started=$(date +%s)
failed=0
running=0
for t in $targets; do
    rm -f "artifacts/$t/last-run.line"
    if [ "$running" -ge "$jobs_max" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
    echo "fuzz.sh: $t for ${secs}s"
    run_target "$t" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
summary=""
for t in $targets; do
    line=$(cat "artifacts/$t/last-run.line" 2>/dev/null) || { line="$t: no result (the run died)"; failed=1; }
    echo "$line"
    summary+="$line"$'\n'
done
echo
echo "fuzz.sh summary (${secs}s per target, fuzzed in $(($(date +%s) - fuzz_started)) s):"
printf '%s' "$summary"
exit "$failed"
