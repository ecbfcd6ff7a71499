#!/usr/bin/env bash
# Run the Playwright MCP server that serves handnode's browser tools, on 127.0.0.1.
#
#   scripts/upstream.sh start PORT    start it (no-op if already running), wait until it listens
#   scripts/upstream.sh stop PORT     stop it and every process it started (chromium included)
#   scripts/upstream.sh status PORT   exit 0 if running
#
# Then: handnode serve --upstream browser=http://127.0.0.1:PORT/mcp
#
# Settings (environment):
#   PLAYWRIGHT_MCP_PREFIX   npm prefix holding @playwright/mcp (default: target/playwright-mcp,
#                           filled by scripts/ci/playwright.sh)
#   HANDNODE_UPSTREAM_DIR   pidfile, log and browser output (default:
#                           ${XDG_RUNTIME_DIR:-/tmp}/handnode-playwright-PORT)
#   HANDNODE_UPSTREAM_HEADED=1   show the browser on the box's display instead of --headless
#   PLAYWRIGHT_MCP_CAPS     extra tool groups for --caps, e.g. vision,pdf,devtools (default: none)
#   CHROMIUM                the browser binary (default: Debian's /usr/lib/chromium/chromium)
#   UPSTREAM_START_TIMEOUT  seconds to wait for the port to listen (default 30)
#   UPSTREAM_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (default 10)
#   HANDNODE_LISTEN         handnode's --listen (default 127.0.0.1:8795) and
#   HANDNODE_ALLOW_HOST     its --allow-host names (comma-separated): the admin listener's
#                           origins, which the browser is started with blocked
#                           (--blocked-origins), as handnode does for its own browsers
#                           (contract §14); `handnode doctor` warns when they are not
#   HANDNODE_BLOCKED_ORIGINS  more origins to block (semicolon-separated)
#
# The server runs in its own session (setsid) and process group. `stop` sends SIGTERM to that
# group (Playwright then closes the browser), waits, and SIGKILLs whatever of the instance is
# left, including chromium, which Playwright starts in a session of its own.
# node is started directly: an npx wrapper would leave the child holding the port.
set -euo pipefail

usage() {
    echo "usage: $0 start|stop|status PORT" >&2
    exit 2
}
[ $# -eq 2 ] || usage
action="$1"
port="$2"
case "$port" in
    '' | *[!0-9]*) echo "$0: PORT must be a number, got '$port'" >&2; exit 2 ;;
esac
if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
    echo "$0: PORT must be 1..65535, got $port" >&2
    exit 2
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${PLAYWRIGHT_MCP_PREFIX:-$root/target/playwright-mcp}"
cli="$prefix/node_modules/@playwright/mcp/cli.js"
chromium="${CHROMIUM:-/usr/lib/chromium/chromium}"
dir="${HANDNODE_UPSTREAM_DIR:-${XDG_RUNTIME_DIR:-/tmp}/handnode-playwright-$port}"
pidfile="$dir/pid"
log="$dir/log"
# Marks every process this instance starts (see instance_pids).
tag="HANDNODE_UPSTREAM_ID=$dir"
start_timeout="${UPSTREAM_START_TIMEOUT:-30}"
stop_timeout="${UPSTREAM_STOP_TIMEOUT:-10}"

listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

# PIDs of every process in the session led by $1 (empty when none is left).
session_pids() {
    ps -e -o pid= -o sid= | awk -v sid="$1" '$2 == sid { print $1 }'
}

# The server we just started is still there: the process itself (setsid has not run yet, or
# ran in place), or a member of the session named after it. Checking the session alone can lose
# a race: right after the fork the child has not called setsid yet, its session is empty,
# and a healthy start is reported as "exited during start-up" with an empty log.
starting() {
    local state
    state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" || state=""
    { [ -n "$state" ] && [ "$state" != Z ]; } || [ -n "$(session_pids "$1")" ]
}

# The recorded leader, if that process is still ours (a session leader with our pid).
running_pid() {
    [ -f "$pidfile" ] || return 1
    local pid
    pid="$(cat "$pidfile")"
    case "$pid" in '' | *[!0-9]*) return 1 ;; esac
    [ -n "$(session_pids "$pid")" ] || return 1
    echo "$pid"
}

# Every process of this instance. node carries $tag in its environment and passes it to the
# browser and chromium's crash handlers, but those start sessions of their own (Playwright
# spawns the browser detached; the crash handlers double-fork), and chromium's zygote
# children overwrite their environment with their process title. So: the sessions of every
# tagged process, remembered across calls in $known_sids because a session outlives the
# tagged process that led it.
known_sids=""
instance_pids() {
    local tagged
    tagged="$(grep -lzxF "$tag" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | paste -sd, -)"
    if [ -n "$tagged" ]; then
        known_sids="$known_sids $(ps -o sid= -p "$tagged" 2>/dev/null | tr '\n' ' ')"
    fi
    [ -n "${known_sids// /}" ] || return 0
    ps -e -o pid= -o sid= | awk -v s="$known_sids" '
        BEGIN { n = split(s, a, " "); for (i = 1; i <= n; i++) if (a[i] > 1) m[a[i]] = 1 }
        ($2 in m) { print $1 }'
}

wait_gone() {
    local deadline=$((SECONDS + $1))
    while [ -n "$(instance_pids)" ]; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# The admin listener's origins as --blocked-origins entries: every spelling that reaches
# HANDNODE_LISTEN, each allow-host with and without the port. The same list as
# browser_argv::admin_origins in the daemon (tests/chains.rs checks the two agree).
admin_origins() {
    local listen="${HANDNODE_LISTEN:-127.0.0.1:8795}"
    local lport="${listen##*:}" lhost="${listen%:*}"
    local out="127.0.0.1:$lport;localhost:$lport;[::1]:$lport;*.localhost:$lport;0.0.0.0:$lport"
    case "$lhost" in
        0.0.0.0 | '[::]') out="$out;*:$lport" ;;
        127.* | '[::1]' | localhost) ;;
        *) out="$out;$lhost:$lport" ;;
    esac
    local host
    local hosts="${HANDNODE_ALLOW_HOST:-}"
    for host in ${hosts//,/ }; do
        host="$(printf '%s' "$host" | tr '[:upper:]' '[:lower:]')"
        out="$out;$host"
        case "$host" in *:*) ;; *) out="$out;$host:$lport" ;; esac
    done
    [ -z "${HANDNODE_BLOCKED_ORIGINS:-}" ] || out="$out;$HANDNODE_BLOCKED_ORIGINS"
    printf '%s' "$out"
}

start() {
    if pid="$(running_pid)"; then
        echo "playwright-mcp already running on 127.0.0.1:$port (pid $pid)"
        return 0
    fi
    if [ ! -f "$cli" ]; then
        echo "$0: $cli not found; run scripts/ci/playwright.sh (or set PLAYWRIGHT_MCP_PREFIX)" >&2
        exit 1
    fi
    if [ ! -x "$chromium" ]; then
        echo "$0: $chromium not found; apt-get install chromium (or set CHROMIUM)" >&2
        exit 1
    fi
    if listening; then
        echo "$0: 127.0.0.1:$port is already in use by another program; pick another PORT" >&2
        exit 1
    fi
    mkdir -p "$dir/output"
    local args=(
        --browser chromium --executable-path "$chromium"
        --isolated
        --host 127.0.0.1 --port "$port" --allowed-hosts "127.0.0.1:$port"
        --output-dir "$dir/output"
        --blocked-origins "$(admin_origins)"
    )
    [ "${HANDNODE_UPSTREAM_HEADED:-0}" = 1 ] || args+=(--headless)
    [ -z "${PLAYWRIGHT_MCP_CAPS:-}" ] || args+=(--caps "$PLAYWRIGHT_MCP_CAPS")
    # Chromium's sandbox cannot run as root; as any other user keep it.
    [ "$(id -u)" -ne 0 ] || args+=(--no-sandbox)
    # Relative file names the browser tools write land in the working directory. The
    # environment it inherits names no handnode secret and no PLAYWRIGHT_MCP_* setting that
    # would widen it (file access, a config file): only the flags above count.
    (
        cd "$dir"
        for name in $(compgen -e); do
            case "$name" in PLAYWRIGHT_MCP_* | HANDNODE_TOKEN | NODE_OPTIONS) unset "$name" ;; esac
        done
        exec env "$tag" setsid node "$cli" "${args[@]}" </dev/null >"$log" 2>&1
    ) &
    local pid=$!
    echo "$pid" >"$pidfile"
    local deadline=$((SECONDS + start_timeout))
    until listening; do
        if ! starting "$pid"; then
            local status=0
            wait "$pid" 2>/dev/null || status=$?
            echo "$0: playwright-mcp exited during start-up (exit status $status); its log ($log):" >&2
            cat "$log" >&2
            rm -f "$pidfile"
            exit 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "$0: playwright-mcp did not listen on 127.0.0.1:$port within ${start_timeout}s; log:" >&2
            cat "$log" >&2
            stop
            exit 1
        fi
        sleep 0.1
    done
    echo "playwright-mcp listening on http://127.0.0.1:$port/mcp (pid $pid, log $log)"
}

stop() {
    local pid
    if pid="$(running_pid)"; then
        known_sids="$pid"
    fi
    if [ -z "$(instance_pids)" ]; then
        rm -f "$pidfile"
        return 0
    fi
    # SIGTERM lets Playwright close the browser and delete its temporary profile.
    if [ -n "${pid:-}" ]; then
        kill -TERM -- "-$pid" 2>/dev/null || true
    else
        # shellcheck disable=SC2046
        kill -TERM $(instance_pids) 2>/dev/null || true
    fi
    if ! wait_gone "$stop_timeout"; then
        # shellcheck disable=SC2046
        kill -KILL $(instance_pids) 2>/dev/null || true
        wait_gone 5 || { echo "$0: processes $(instance_pids | tr '\n' ' ')survived SIGKILL" >&2; exit 1; }
    fi
    rm -f "$pidfile"
}

case "$action" in
    start) start ;;
    stop) stop ;;
    status)
        if pid="$(running_pid)"; then echo "running (pid $pid)"; else echo "not running"; exit 1; fi
        ;;
    *) usage ;;
esac
