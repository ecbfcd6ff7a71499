#!/usr/bin/env bash
# Real display servers for the graphical-tool tests: Xvfb on :99 and a headless sway
# (run as nobody: sway refuses root). Idempotent. Writes the variables to export into
# target/displays.env; `stop` ends both.
#
#   bash scripts/ci/displays.sh start && set -a && . target/displays.env && set +a
#   bash scripts/ci/displays.sh stop
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
ENV_FILE=$ROOT/target/displays.env
X_DISPLAY=:99
X_SIZE=1280x800
# Different from the X screen on purpose, so a test that mixes the two up fails.
SWAY_SIZE=1024x768
SWAY_UID=65534
SWAY_GID=65534
RUN_DIR=/tmp/handnode-displays
SWAY_RUNTIME=$RUN_DIR/sway-runtime
# Readiness polling: tries × interval (s).
TRIES=100
INTERVAL=0.1

log() { echo "displays: $*" >&2; }

install_packages() {
    # matchbox-window-manager, dbus (dbus-daemon; its own package only on newer Debian): a
    # grant's own display (§19, tests/own_display.rs).
    local pkgs=(xvfb xdotool scrot xterm x11-utils x11-xserver-utils sway grim wtype foot
        matchbox-window-manager dbus
        foot-terminfo libnotify-bin fonts-dejavu-core)
    local missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_xvfb() {
    if xdpyinfo -display "$X_DISPLAY" >/dev/null 2>&1; then
        return 0
    fi
    # A lock left by an Xvfb that was killed (a CI-like run's PID namespace ending
    # SIGKILLs it) names a pid that may now be some other process: Xvfb would then refuse
    # with "Server is already active". Nothing answers on the display (checked above), so
    # a lock whose pid is not an Xvfb is stale.
    local lock=/tmp/.X${X_DISPLAY#:}-lock
    if [ -f "$lock" ]; then
        local holder
        holder=$(tr -d ' ' <"$lock")
        if [ "$(cat "/proc/$holder/comm" 2>/dev/null)" != Xvfb ]; then
            log "removing the stale $lock (pid $holder is not an Xvfb)"
            rm -f "$lock" "/tmp/.X11-unix/X${X_DISPLAY#:}"
        fi
    fi
    log "starting Xvfb $X_DISPLAY ${X_SIZE}"
    setsid Xvfb "$X_DISPLAY" -screen 0 "${X_SIZE}x24" -noreset -nolisten tcp \
        >"$RUN_DIR/xvfb.log" 2>&1 </dev/null &
    echo $! >"$RUN_DIR/xvfb.pid"
    for _ in $(seq $TRIES); do
        if xdpyinfo -display "$X_DISPLAY" >/dev/null 2>&1; then
            # Xvfb's screensaver blanks after 600 s idle; long CI runs must not see black.
            xset -display "$X_DISPLAY" s off
            return 0
        fi
        alive "$RUN_DIR/xvfb.pid" || break
        sleep $INTERVAL
    done
    log "Xvfb did not come up:"; cat "$RUN_DIR/xvfb.log" >&2; return 1
}

sway_socket() { ls "$SWAY_RUNTIME"/wayland-* 2>/dev/null | grep -v '\.lock$' | head -n1; }
sway_ipc() { ls "$SWAY_RUNTIME"/sway-ipc.*.sock 2>/dev/null | head -n1; }

start_sway() {
    if alive "$RUN_DIR/sway.pid" && [ -n "$(sway_socket)" ] && [ -n "$(sway_ipc)" ]; then
        return 0
    fi
    log "starting headless sway ${SWAY_SIZE} as uid $SWAY_UID"
    rm -rf "$SWAY_RUNTIME"
    install -d -m 0700 -o "$SWAY_UID" -g "$SWAY_GID" "$SWAY_RUNTIME"
    cat >"$RUN_DIR/sway.config" <<CONF
output HEADLESS-1 mode --custom ${SWAY_SIZE} position 0 0 scale 1
xwayland disable
default_border none
focus_follows_mouse no
seat * hide_cursor 0
CONF
    chmod 0644 "$RUN_DIR/sway.config"
    # Its own runtime dir as the working dir: what sway execs (foot, the tests' terminals)
    # starts there, and the checkout may be in a folder that uid $SWAY_UID cannot enter.
    setsid setpriv --reuid=$SWAY_UID --regid=$SWAY_GID --clear-groups \
        env -i -C "$SWAY_RUNTIME" PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$SWAY_RUNTIME" XDG_RUNTIME_DIR="$SWAY_RUNTIME" \
        WLR_BACKENDS=headless WLR_LIBINPUT_NO_DEVICES=1 WLR_RENDERER=pixman \
        sway -c "$RUN_DIR/sway.config" >"$RUN_DIR/sway.log" 2>&1 </dev/null &
    echo $! >"$RUN_DIR/sway.pid"
    for _ in $(seq $TRIES); do
        if [ -n "$(sway_socket)" ] && [ -n "$(sway_ipc)" ] \
            && SWAYSOCK="$(sway_ipc)" swaymsg -t get_outputs >/dev/null 2>&1; then
            return 0
        fi
        alive "$RUN_DIR/sway.pid" || break
        sleep $INTERVAL
    done
    log "sway did not come up:"; cat "$RUN_DIR/sway.log" >&2; return 1
}

stop_all() {
    for name in sway xvfb; do
        if alive "$RUN_DIR/$name.pid"; then
            kill "$(cat "$RUN_DIR/$name.pid")" 2>/dev/null || true
        fi
        rm -f "$RUN_DIR/$name.pid"
    done
    rm -f "$ENV_FILE"
}

case "${1:-start}" in
start)
    install_packages
    mkdir -p "$RUN_DIR" "$ROOT/target"
    start_xvfb
    start_sway
    {
        echo "DISPLAY=$X_DISPLAY"
        echo "WAYLAND_DISPLAY=$(basename "$(sway_socket)")"
        echo "XDG_RUNTIME_DIR=$SWAY_RUNTIME"
        echo "SWAYSOCK=$(sway_ipc)"
        echo "HANDNODE_TEST_X11_SIZE=$X_SIZE"
        echo "HANDNODE_TEST_SWAY_SIZE=$SWAY_SIZE"
    } >"$ENV_FILE"
    log "ready; environment in $ENV_FILE"
    cat "$ENV_FILE"
    ;;
stop)
    stop_all
    ;;
*)
    echo "usage: $0 [start|stop]" >&2
    exit 2
    ;;
esac
