#!/usr/bin/env bash
# Runs every test of handnode, after installing what the tests need (apt and npm packages,
# display servers, the Playwright upstream, websocat). This is the README's test command and
# what CI runs through .ci/run. Safe to run again: every install step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# One build from scratch: an incremental cache would only add ~2 GB to target/ (disk is what
# a CI machine may lack; see Cargo.toml's [profile.dev]).
export CARGO_INCREMENTAL=0

# Each step's time is printed as the next one starts (and the last at exit), so a slow step
# shows in CI's output: the whole run must stay well inside CI's limit.
step_name= step_start=$SECONDS
step_done() { [ -z "$step_name" ] || printf '== %s: %d s (total %d s)\n' "$step_name" $((SECONDS - step_start)) "$SECONDS"; }
step() { step_done; step_name=$*; step_start=$SECONDS; printf '\n== %s\n' "$*"; }

step "system packages for the build and the tests"
bash scripts/ci/packages.sh

step "format and lints"
cargo fmt --check
cargo clippy --all-targets -- -D warnings

step "display servers for tests/display.rs (Xvfb :99, headless sway)"
bash scripts/ci/displays.sh start
set -a && . target/displays.env && set +a
trap 'step_done; bash scripts/ci/displays.sh stop' EXIT

step "chromium and the pinned Playwright MCP upstream for tests/upstream.rs"
bash scripts/ci/playwright.sh

step "install: install.sh into a temp prefix, systemd-analyze verify --user, static binary"
bash scripts/ci/install-check.sh

step "unit and integration tests"
cargo test --all-targets

step "the wall's attack tests as an unprivileged user with a delegated cgroup subtree (§21)"
bash scripts/ci/unprivileged.sh

step "end to end: the release binary as a new user and against a websocat pod"
bash scripts/e2e.sh

# Every section at a tenth of its counts, no timing assertions: a bench that breaks or hangs
# fails CI (contract §24). The static size figure comes from dist-check's build instead.
step "bench smoke run: scripts/bench.sh --quick (every section, a tenth of the counts)"
timeout --kill-after=10 900 bash scripts/bench.sh --quick --no-static

step "release artifacts: static x86_64/aarch64/armv7/armv6 binaries, e2e under qemu-user, install.sh --from-dist"
bash scripts/ci/dist-check.sh

step "interop: the official MCP TypeScript SDK against /mcp"
bash scripts/interop.sh

# 30 s a target, one target per core at a time: the fuzz step is ~6 min of building (and
# cargo-fuzz's install on a fresh machine) plus 10 targets × 30 s over 2 cores.
step "fuzzing: every cargo-fuzz target for 30 s, one per core (installs cargo-fuzz)"
bash scripts/fuzz.sh 30

# Last: its scratch copy builds over target/'s debug artifacts (scripts/ci/newcomer.sh).
step "a new tool is its module plus one line: the newcomer's dry run (§26)"
bash scripts/ci/newcomer.sh
