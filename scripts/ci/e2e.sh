#!/usr/bin/env bash
# Install what scripts/e2e.sh and scripts/interop.sh need: curl and jq from Debian, websocat
# 1.x (built with cargo, without TLS: the stub pod is plain ws:// on loopback) and the pinned
# official MCP TypeScript SDK in a local prefix. Idempotent and quiet: a second run with
# everything in place does nothing and prints nothing. Prints nothing on stdout but may be
# asked for the websocat path with `scripts/ci/e2e.sh --websocat-path`.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
# websocat 1.14.1: `ws-l:` + `sh-c:` per connection, --close-status-code, --header-to-env.
websocat_version="${WEBSOCAT_VERSION:-1.14.1}"
tools="${E2E_TOOLS_PREFIX:-$root/target/e2e-tools}"
# The MCP TypeScript SDK version the interop check is known to pass with.
sdk_version="${MCP_SDK_VERSION:-1.32.2}"
sdk_prefix="${MCP_SDK_PREFIX:-$root/target/interop}"

# shellcheck source=scripts/ci/apt-lib.sh
. "$root/scripts/ci/apt-lib.sh"

# The websocat to use: one on PATH if it is 1.x (4.x has another CLI), else ours.
websocat_path() {
    local w
    w="$(command -v websocat 2>/dev/null || true)"
    if [ -n "$w" ] && "$w" --version 2>/dev/null | grep -q '^websocat 1\.'; then
        echo "$w"
    else
        echo "$tools/bin/websocat"
    fi
}

if [ "${1:-}" = "--websocat-path" ]; then
    websocat_path
    exit 0
fi

need_apt=()
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v jq >/dev/null 2>&1 || need_apt+=(jq)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
apt_install e2e.sh "${need_apt[@]}" || exit 1

w="$(websocat_path)"
if [ ! -x "$w" ]; then
    log="$(mktemp)"
    # No default features: no OpenSSL to link (so no libssl-dev), a third of the build time.
    if ! cargo install websocat --version "$websocat_version" --locked --quiet \
        --no-default-features --features tokio-process,unix_stdio,signal_handler \
        --root "$tools" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "e2e.sh: cargo install websocat $websocat_version failed" >&2
        exit 1
    fi
    rm -f "$log"
fi
[ -x "$w" ] || { echo "e2e.sh: $w missing after install" >&2; exit 1; }

installed=""
pkg="$sdk_prefix/node_modules/@modelcontextprotocol/sdk/package.json"
if [ -f "$pkg" ]; then
    installed="$(node -p "require('$pkg').version" 2>/dev/null || true)"
fi
if [ "$installed" != "$sdk_version" ]; then
    mkdir -p "$sdk_prefix"
    npm install --prefix "$sdk_prefix" --save-exact --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/sdk@$sdk_version" >/dev/null
fi
[ -f "$pkg" ] || { echo "e2e.sh: $pkg missing after install" >&2; exit 1; }
