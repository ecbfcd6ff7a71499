#!/usr/bin/env bash
# Interop: the official MCP TypeScript SDK (pinned in scripts/ci/e2e.sh) talks to the
# release binary's POST /mcp through its own Client + StreamableHTTPClientTransport
# (scripts/interop-client.cjs): connect, tools/list (the local tools of docs/classes.md, four annotations each),
# bash echo hi, sys_info, errors, DELETE, and a wrong token. Exits non-zero on any failure.
#
# Env: HANDNODE_BIN (default: build target/release/handnode), MCP_SDK_PREFIX.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/e2e-lib.sh
. "$root/scripts/e2e-lib.sh"

"$root/scripts/ci/e2e.sh" || { echo "FAIL: installing the interop tools"; exit 1; }
export MCP_SDK_PREFIX="${MCP_SDK_PREFIX:-$root/target/interop}"

release_binary "$root" || exit 1
scratch_dir interop

token="interop-$RANDOM$RANDOM$RANDOM"
if ! start_daemon "$tmp/log" env -i "PATH=$PATH" "HOME=$tmp" "RUST_LOG=debug" \
    "HANDNODE_TOKEN=$token" "$bin" --listen 127.0.0.1:0 --state-dir "$tmp/state" \
    --config-dir "$tmp/config" --no-notify --no-sd-notify; then
    echo "FAIL: the daemon starts"
    exit 1
fi

# The client is bounded too, as a whole.
HANDNODE_URL="$daemon_url" HANDNODE_TOKEN="$token" INTEROP_TMP="$tmp" \
    timeout 120 node "$root/scripts/interop-client.cjs"
status=$?
if [ "$status" -ne 0 ]; then
    echo "interop failed (exit $status); the daemon's log (requests only):"
    grep -E 'admin: |/mcp' "$tmp/log" | tail -n 40
fi
exit "$status"
