# shellcheck shell=bash disable=SC2034  # sets globals (daemon_url, stop_status) for the caller
# Helpers shared by scripts/e2e.sh and scripts/interop.sh (sourced, not run): the binary
# under test, a scratch dir, PASS/FAIL bookkeeping, bounded waits, starting the daemon on an
# ephemeral port, and killing every process the script started when it exits.

passed=0
failed=0
started_pids=()

# release_binary ROOT : sets bin to $HANDNODE_BIN, or when that is unset builds ROOT with
# `cargo build --release` and uses its handnode. Sets binc to the command that runs it: bin
# itself, or under $HANDNODE_RUNNER (e.g. qemu-aarch64-static, for a Pi binary on x86_64).
# Says FAIL and returns non-zero if the build fails or the runner is missing.
release_binary() {
    bin="${HANDNODE_BIN:-}"
    if [ -z "$bin" ]; then
        (cd "$1" && cargo build --release --quiet) || { echo "FAIL: cargo build --release"; return 1; }
        bin="$1/target/release/handnode"
    fi
    binc=("$bin")
    if [ -n "${HANDNODE_RUNNER:-}" ]; then
        command -v "$HANDNODE_RUNNER" >/dev/null \
            || { echo "FAIL: HANDNODE_RUNNER=$HANDNODE_RUNNER is not installed"; return 1; }
        binc=("$(command -v "$HANDNODE_RUNNER")" "$bin")
    fi
}

# scratch_dir NAME : sets tmp to a fresh dir handnode-NAME.XXXXXX under $TMPDIR (or /tmp).
# On exit every process the script started is killed and the dir removed (E2E_KEEP=1 keeps
# it); INT and TERM exit 130 through the same cleanup.
scratch_dir() {
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/handnode-$1.XXXXXX")"
    trap scratch_cleanup EXIT
    trap 'exit 130' INT TERM
}

# shellcheck disable=SC2317  # run by the EXIT trap scratch_dir sets
scratch_cleanup() {
    kill_started
    if [ "${E2E_KEEP:-}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}

pass() {
    passed=$((passed + 1))
    echo "PASS: $1"
}

fail() {
    failed=$((failed + 1))
    echo "FAIL: $1${2:+ — $2}"
}

# check NAME CMD... : PASS if the command succeeds, else FAIL.
check() {
    local name="$1"
    shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}

# check_json NAME JSON JQ-FILTER : PASS if the filter is true of the JSON, else FAIL with the JSON.
check_json() {
    if jq -e "$3" >/dev/null 2>&1 <<<"$2"; then
        pass "$1"
    else
        fail "$1" "jq '$3' is false of: $(head -c 2000 <<<"$2")"
    fi
}

# summary: the final line; the exit status says whether everything passed.
summary() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}

# wait_until SECONDS CMD... : run CMD every 50 ms until it succeeds; non-zero on timeout.
wait_until() {
    local deadline=$(( $(date +%s%N) + $1 * 1000000000 ))
    shift
    until "$@"; do
        [ "$(date +%s%N)" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

kill_started() {
    local pid
    for pid in "${started_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${started_pids[@]}"; do
        # Bounded: a process that ignores SIGTERM for 5 s gets SIGKILL.
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    started_pids=()
}

# The address a daemon logged in "admin API listening on http://ADDR", or nothing yet.
listening_addr() {
    sed -n 's/.*admin API listening on http:\/\/\([0-9.:]*\).*/\1/p' "$1" | head -n 1
}

# Has the daemon (log $1, pid $2) logged its address, or died trying?
daemon_settled() {
    [ -n "$(listening_addr "$1")" ] || ! kill -0 "$2" 2>/dev/null
}

# start_daemon LOG CMD... : start the daemon command (with any `env` prefix) with stderr in
# LOG, remember its pid, and wait for its address. Sets daemon_pid and daemon_url.
start_daemon() {
    local log="$1" addr
    shift
    # Created here, not by the background job's redirection, so the first look cannot race it.
    : >"$log"
    "$@" >/dev/null 2>>"$log" &
    daemon_pid=$!
    started_pids+=("$daemon_pid")
    daemon_url=""
    wait_until 20 daemon_settled "$log" "$daemon_pid" || true
    addr="$(listening_addr "$log")"
    if [ -z "$addr" ]; then
        echo "the daemon did not log its address within 20 s (or exited); its log:" >&2
        cat "$log" >&2
        return 1
    fi
    daemon_url="http://$addr"
}

# stop_pid PID : SIGTERM, wait up to 10 s; sets stop_status to the exit status (124 if it
# would not exit and had to be killed). Not in a subshell: only the parent can `wait`.
stop_pid() {
    local pid="$1"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null
        stop_status=124
        return
    fi
    wait "$pid" 2>/dev/null
    stop_status=$?
}
