#!/usr/bin/env bash
# Install what the browser-tool tests need: Debian's chromium and the pinned
# @playwright/mcp in a local prefix (no Playwright browser download). Idempotent and quiet:
# a second run with everything in place does nothing and prints nothing.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
# The pinned upstream version; 0.0.83 is known to work with Debian's chromium.
version="${PLAYWRIGHT_MCP_VERSION:-0.0.83}"
prefix="${PLAYWRIGHT_MCP_PREFIX:-$root/target/playwright-mcp}"
chromium="/usr/lib/chromium/chromium"

# shellcheck source=scripts/ci/apt-lib.sh
. "$root/scripts/ci/apt-lib.sh"

need_apt=()
[ -x "$chromium" ] || need_apt+=(chromium)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
apt_install playwright.sh "${need_apt[@]}" || exit 1

cli="$prefix/node_modules/@playwright/mcp/cli.js"
installed=""
if [ -f "$prefix/node_modules/@playwright/mcp/package.json" ]; then
    installed="$(node -p "require('$prefix/node_modules/@playwright/mcp/package.json').version" 2>/dev/null || true)"
fi
if [ ! -f "$cli" ] || [ "$installed" != "$version" ]; then
    mkdir -p "$prefix"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$prefix" --no-audit --no-fund \
        --loglevel=error "@playwright/mcp@$version" >/dev/null
fi
[ -f "$cli" ] || { echo "playwright.sh: $cli missing after install" >&2; exit 1; }
[ -x "$chromium" ] || { echo "playwright.sh: $chromium missing after install" >&2; exit 1; }
# The console's browser tests (tests/console.rs) drive chromium through the playwright-core
# that @playwright/mcp depends on; npm puts it at the top of the prefix.
core="$prefix/node_modules/playwright-core/package.json"
[ -f "$core" ] || { echo "playwright.sh: $core missing after install" >&2; exit 1; }
