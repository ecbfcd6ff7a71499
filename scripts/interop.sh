#!/usr/bin/env bash
# Interop: the official MCP TypeScript SDK (pinned in scripts/ci/e2e.sh) talks to the
# release binary's POST /mcp through its own Client + StreamableHTTPClientTransport
# (scripts/interop-client.cjs): connect, tools/list (the local tools of docs/classes.md, four annotations each),
# bash echo hi, sys_info, errors, DELETE, and a wrong token. Then the current MCP
# (CONTRACT §20), with what scripts/ci/mcp-current.sh installs (Node 22 from npm): the
# official SDK 2.x client at 2025-11-25 and at the stateless 2026-07-28
# (scripts/interop-client-v2.cjs), the SDK client built from the README's MCP client block
# (scripts/interop-readme-client.cjs), and the newest MCP conformance suite's server scenarios
# that need no fixture tools (scripts/conformance-check.cjs judges them). Exits non-zero on
# any failure.
#
# Env: HANDNODE_BIN (default: build target/release/handnode), MCP_SDK_PREFIX,
# MCP_CURRENT_PREFIX.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/e2e-lib.sh
. "$root/scripts/e2e-lib.sh"

"$root/scripts/ci/e2e.sh" || { echo "FAIL: installing the interop tools"; exit 1; }
"$root/scripts/ci/mcp-current.sh" || { echo "FAIL: installing Node 22, the SDK 2.x client and the conformance suite"; exit 1; }
export MCP_SDK_PREFIX="${MCP_SDK_PREFIX:-$root/target/interop}"
export MCP_CURRENT_PREFIX="${MCP_CURRENT_PREFIX:-$root/target/mcp-current}"
node22="$("$root/scripts/ci/mcp-current.sh" --node-path)"
conformance="$MCP_CURRENT_PREFIX/node_modules/@modelcontextprotocol/conformance/dist/index.js"
# The conformance suite's server scenarios that need no fixture tools of the server's own
# (the others call tools such as `test_missing_capability` or `slow_compute`).
scenarios=(server-initialize server-session-lifecycle server-stateless ping tools-list
    dns-rebinding-protection caching http-header-validation http-custom-header-server-validation
    tasks-capability-negotiation)

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

echo "-- the official SDK 2.x client, legacy (2025-11-25) and stateless (2026-07-28)"
HANDNODE_URL="$daemon_url" HANDNODE_TOKEN="$token" \
    timeout 120 "$node22" "$root/scripts/interop-client-v2.cjs" || status=1

# The README's "Try it with your MCP client": a first start with nothing configured (it writes
# the token), the token read with the README's own command, and the SDK client built from the
# README's block (scripts/interop-readme-client.cjs).
echo "-- the README's MCP client block, with the official SDK client"
mkdir -p "$tmp/home"
if start_daemon "$tmp/log-readme" env -i "PATH=$PATH" "HOME=$tmp/home" \
    "$bin" --listen 127.0.0.1:0 --state-dir "$tmp/state-readme" --no-notify --no-sd-notify; then
    readme_token="$(HOME="$tmp/home" bash -c 'cat ~/.config/handnode/token')"
    HANDNODE_URL="$daemon_url" HANDNODE_TOKEN="$readme_token" \
        timeout 120 node "$root/scripts/interop-readme-client.cjs" || status=1
else
    echo "FAIL: the README's daemon starts"
    status=1
fi

if [ "$status" -ne 0 ]; then
    echo "interop failed; the daemon's log (requests only):"
    grep -E 'admin: |/mcp' "$tmp/log" | tail -n 40
fi

# The suite sends no credentials: a second daemon lets loopback callers in.
echo "-- the MCP conformance suite $(sed -n 's/^  "version": "\(.*\)",$/\1/p' \
    "$MCP_CURRENT_PREFIX/node_modules/@modelcontextprotocol/conformance/package.json"), server scenarios"
if ! start_daemon "$tmp/log-conformance" env -i "PATH=$PATH" "HOME=$tmp" \
    "$bin" --listen 127.0.0.1:0 --state-dir "$tmp/state-conformance" \
    --config-dir "$tmp/config-conformance" --no-notify --no-sd-notify --insecure-local; then
    echo "FAIL: the conformance daemon starts"
    exit 1
fi
for scenario in "${scenarios[@]}"; do
    timeout 120 "$node22" "$conformance" server --url "$daemon_url/mcp" --scenario "$scenario" \
        -o "$tmp/conformance" >"$tmp/conformance-$scenario.log" 2>&1
done
"$node22" "$root/scripts/conformance-check.cjs" "$tmp/conformance" "${scenarios[@]}" || status=1
exit "$status"
