# shellcheck shell=bash
# Sourced (not run) by scripts/ci/e2e.sh and scripts/ci/playwright.sh: installing missing
# Debian packages quietly, as root or through `sudo -n`.

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

# apt_install WHO PKG... : apt-get update and install the packages (nothing to do with none).
# Quiet: apt's output is shown only if it fails, followed by "WHO: apt-get install PKG...
# failed" on stderr, and the status is then non-zero.
apt_install() {
    local who="$1" log
    shift
    [ "$#" -gt 0 ] || return 0
    export DEBIAN_FRONTEND=noninteractive
    log="$(mktemp)"
    if ! { as_root apt-get update -qq && as_root apt-get install -y -qq --no-install-recommends \
        "$@"; } >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "$who: apt-get install $* failed" >&2
        return 1
    fi
    rm -f "$log"
}
