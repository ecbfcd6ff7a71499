#!/usr/bin/env bash
# Debian packages every test run needs. Idempotent and quiet when everything is present.
# bubblewrap: the throwaway browsers run inside bwrap (contract §14), and the tests prove
# the daemon's files are empty there.
# xvfb zenity at-spi2-core dbus-daemon: tests/a11y.rs drives a GTK dialog over the
# accessibility bus on an Xvfb and session bus of its own (contract §17).
# passt: an own display's wall gets its own network through pasta (§21); x11-utils
# x11-xserver-utils: tests/walls.rs tries xdpyinfo and xhost on the owner's display.
# xterm: tests/apps.rs checks that `--apps` refuses the box's real terminal entry, and
# tests/console.rs livebox.cjs types into one on the box's display.
# tigervnc-standalone-server: own displays run on Xvnc, whose RFB socket the live view
# (§23, tests/live_view.rs) bridges. x11vnc wayvnc: the box's own display in the live view
# (tests/live_view_box.rs, tests/console.rs livebox.cjs).
# novnc: the console's live view (§23, tests/console.rs live.cjs and livebox.cjs) loads its
# modules from /usr/share/novnc.
set -euo pipefail
need=()
for pkg in "$@" pkg-config libssl-dev curl python3 jq procps bubblewrap xvfb zenity at-spi2-core dbus-daemon xterm passt x11-utils x11-xserver-utils tigervnc-standalone-server x11vnc wayvnc novnc; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
