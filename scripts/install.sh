#!/usr/bin/env bash
# Install handnode for the current user: the binary, the systemd user unit(s) and an admin
# token file. Run it again at any time: it changes only what differs and says so.
#
#   scripts/install.sh [--prefix DIR] [--binary PATH | --from-dist DIR] [--no-systemd]
#   scripts/install.sh [--prefix DIR] --uninstall [--purge]
#
#   (no --prefix)   binary  ~/.local/bin/handnode
#                   units   ${XDG_CONFIG_HOME:-~/.config}/systemd/user/
#   --prefix DIR    binary  DIR/bin/handnode
#                   units   DIR/share/systemd/user/  (a user manager searches this for
#                           DIR = ~/.local, /usr/local or /usr)
#   always          token   ${XDG_CONFIG_HOME:-~/.config}/handnode/token (0600, dir 0700),
#                           created only if missing, never printed; where handnode and its
#                           operator commands look by default
#   --binary PATH   install this binary instead of building one (cargo build --release)
#   --from-dist DIR install the artifact of DIR (scripts/build-static.sh's target/dist, copied
#                   over) for this machine's `uname -m`: x86_64, aarch64/arm64, armv7l, armv6l. Its
#                   SHA256SUMS line is checked first; a mismatch or no artifact changes nothing
#   --no-systemd    no units: an autostart entry instead,
#                   ${XDG_CONFIG_HOME:-~/.config}/autostart/handnode.desktop, that starts
#                   `handnode serve` with your desktop session (the route for a box without
#                   systemd, taken by itself when `systemctl is-system-running` says offline)
#   --uninstall     remove what this script installed (it keeps a list); the token, grants
#                   and audit log stay unless --purge is given too
#
# The unit's ExecStart is rewritten to the installed binary. Nothing is enabled or started:
# the next steps are printed at the end. On a box whose init is not systemd an enable link
# (default.target.wants/handnode.service, which `systemctl --user enable` makes even when it
# then fails) starts nothing and is removed. Details: docs/install.md.
set -euo pipefail

die() { echo "install: error: $*" >&2; exit 1; }
say() { echo "install: $*"; }

prefix=
binary=
from_dist=
uninstall=0
purge=0
no_systemd=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary=$2; shift 2 ;;
        --binary=*) binary=${1#--binary=}; shift ;;
        --from-dist) [ $# -ge 2 ] || die "--from-dist needs a directory"; from_dist=$2; shift 2 ;;
        --from-dist=*) from_dist=${1#--from-dist=}; shift ;;
        --uninstall) uninstall=1; shift ;;
        --purge) purge=1; shift ;;
        --no-systemd) no_systemd=1; shift ;;
        -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see scripts/install.sh --help)" ;;
    esac
done
[ "$purge" = 0 ] || [ "$uninstall" = 1 ] || die "--purge only goes with --uninstall"
[ -z "$binary" ] || [ "$uninstall" = 0 ] || die "--binary makes no sense with --uninstall"
[ -z "$from_dist" ] || [ "$uninstall" = 0 ] || die "--from-dist makes no sense with --uninstall"
[ -z "$from_dist" ] || [ -z "$binary" ] || die "--binary and --from-dist both name the binary; give one"
[ "$no_systemd" = 0 ] || [ "$uninstall" = 0 ] || die "--no-systemd makes no sense with --uninstall (it removes whatever was installed)"
[ -n "${HOME:-}" ] || die "HOME is not set"

# Paths end up in a unit file and in sed expressions: refuse characters that would need
# quoting there rather than quote them subtly wrong.
check_path() {
    case "$2" in
        /*) ;;
        *) die "$1 must be an absolute path, not '$2'" ;;
    esac
    case "$2" in
        *[[:space:]%\"\'\\\|]*) die "$1 '$2' contains whitespace or one of % \" ' \\ |; pick a plainer path" ;;
    esac
}

if [ -n "$prefix" ]; then
    case "$prefix" in /*) ;; *) prefix=$PWD/$prefix ;; esac
    prefix=${prefix%/}
    check_path --prefix "$prefix"
    bin_dir=$prefix/bin
    unit_dir=$prefix/share/systemd/user
    data_dir=$prefix/share/handnode
else
    bin_dir=$HOME/.local/bin
    unit_dir=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
    data_dir=${XDG_DATA_HOME:-$HOME/.local/share}/handnode
fi
check_path "the binary directory" "$bin_dir"
config_dir=${XDG_CONFIG_HOME:-$HOME/.config}/handnode
state_dir=${XDG_STATE_HOME:-$HOME/.local/state}/handnode
token_file=$config_dir/token
manifest=$data_dir/install-manifest
repo=$(cd "$(dirname "$0")/.." && pwd)
installed_bin=$bin_dir/handnode
autostart=${XDG_CONFIG_HOME:-$HOME/.config}/autostart/handnode.desktop
wants=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user/default.target.wants/handnode.service

# What systemctl says of this box's init: "offline" when it is not systemd (a container, a
# box with another init), "not installed" without systemctl.
sd_state() {
    command -v systemctl >/dev/null || { echo "not installed"; return; }
    systemctl is-system-running 2>/dev/null || true
}

# True when this box's init is not systemd. Not the same as a shell without a user bus (su,
# ssh without linger) on a systemd box, where the units and an enable link are right and stay.
box_without_systemd() {
    case "$(sd_state)" in
        offline | "" | "not installed") return 0 ;;
        *) return 1 ;;
    esac
}

changed=0

# Put $1 (a file) at $2 with mode $3, atomically, unless $2 already has that content and mode.
put() {
    local src=$1 dst=$2 mode=$3 tmp
    if [ -f "$dst" ] && cmp -s "$src" "$dst" && [ "$(stat -c %a "$dst")" = "$mode" ]; then
        say "unchanged  $dst"
        return
    fi
    mkdir -p "$(dirname "$dst")"
    tmp=$(mktemp "$dst.XXXXXX")
    cp "$src" "$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$dst"
    say "installed  $dst"
    changed=1
}

# SIGTERM every process of this user whose executable is the installed binary and wait for
# each to exit (5 s, then SIGKILL): --uninstall must not leave a daemon running.
stop_installed_daemons() {
    [ -e "$installed_bin" ] || return 0
    local target pids=() pid exe i
    target=$(readlink -f "$installed_bin")
    for exe in /proc/[0-9]*/exe; do
        pid=${exe#/proc/}; pid=${pid%/exe}
        [ "$pid" != "$$" ] || continue
        [ "$(readlink "$exe" 2>/dev/null)" = "$target" ] || continue
        pids+=("$pid")
    done
    [ "${#pids[@]}" -gt 0 ] || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
        for i in "${!pids[@]}"; do
            # Gone, or a zombie its parent has not reaped yet: it runs nothing any more.
            if ! kill -0 "${pids[$i]}" 2>/dev/null || grep -q ') Z ' "/proc/${pids[$i]}/stat" 2>/dev/null; then
                unset 'pids[i]'
            fi
        done
        [ "${#pids[@]}" -gt 0 ] || break
        sleep 0.1
    done
    if [ "${#pids[@]}" -gt 0 ]; then
        kill -KILL "${pids[@]}" 2>/dev/null || true
        say "killed     handnode pid ${pids[*]} (it did not stop within 5 s of SIGTERM)"
    fi
    say "stopped    the running handnode ($target)"
}

# True when a user manager is reachable and loads the unit from $1.
manager_uses() {
    command -v systemctl >/dev/null || return 1
    local frag
    frag=$(systemctl --user show -p FragmentPath --value handnode.service 2>/dev/null) || return 1
    [ "$frag" = "$1" ]
}

if [ "$uninstall" = 1 ]; then
    if [ -f "$manifest" ]; then
        if manager_uses "$unit_dir/handnode.service"; then
            systemctl --user disable --now handnode.service 2>/dev/null || true
            say "stopped and disabled handnode.service"
        fi
        # Without a reachable user manager (a box without systemd, a shell without a user
        # bus) `disable --now` did nothing: the enable link and a running daemon stay. Remove
        # the link `systemctl --user enable` made, and stop every process running the
        # installed binary, before the binary goes (its /proc/PID/exe then reads "(deleted)").
        if [ -L "$wants" ]; then rm -f "$wants"; say "removed    $wants"; fi
        stop_installed_daemons
        while IFS= read -r f; do
            [ -n "$f" ] || continue
            if [ -e "$f" ]; then rm -f "$f"; say "removed    $f"; else say "was gone   $f"; fi
        done <"$manifest"
        rm -f "$manifest"
        rmdir "$data_dir" 2>/dev/null || true
        if [ -z "$prefix" ] && command -v systemctl >/dev/null; then
            systemctl --user daemon-reload 2>/dev/null || true
        fi
    else
        say "nothing to uninstall under ${prefix:-your home} (no $manifest)"
    fi
    if [ "$purge" = 1 ]; then
        for f in "$token_file" "$state_dir"; do
            if [ -e "$f" ]; then rm -rf "$f"; say "purged     $f"; fi
        done
        rmdir "$config_dir" 2>/dev/null || true
    else
        [ -e "$token_file" ] && say "kept       $token_file (--purge removes it)"
        [ -e "$state_dir" ] && say "kept       $state_dir (grants and audit log; --purge removes it)"
    fi
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The binary: from a dist dir, given, or built here. A dist artifact is copied first and the
# copy is checked, so the bytes installed are the bytes whose checksum matched.
if [ -n "$from_dist" ]; then
    [ -d "$from_dist" ] || die "--from-dist: $from_dist is not a directory"
    machine=$(uname -m)
    case "$machine" in
        x86_64 | amd64) arch=x86_64 ;;
        aarch64 | arm64) arch=aarch64 ;;
        armv7l | armv8l) arch=armv7 ;;
        armv6l) arch=armv6 ;;
        *) die "no handnode artifact is built for this machine ($machine); build here with \
scripts/install.sh; nothing was changed" ;;
    esac
    sums=$from_dist/SHA256SUMS
    [ -f "$sums" ] || die "$sums is missing: without checksums nothing from $from_dist is installed; \
copy SHA256SUMS along with the artifact; nothing was changed"
    # Entries as sha256sum writes them: HASH, two spaces (or space-star), the file name.
    mapfile -t entries < <(grep -E "^[0-9a-f]{64} [ *]handnode-[^/[:space:]]+-$arch\$" "$sums" || true)
    case ${#entries[@]} in
        1) ;;
        0) die "$sums lists no artifact for $arch (uname -m: $machine); it lists: \
$(sed -E 's/^[0-9a-f]{64} [ *]//' "$sums" | tr '\n' ' ')— build one with scripts/build-static.sh --all; nothing was changed" ;;
        *) die "$sums lists several artifacts for $arch: \
$(printf '%s\n' "${entries[@]}" | sed -E 's/^[0-9a-f]{64} [ *]//' | tr '\n' ' ')— keep one version; nothing was changed" ;;
    esac
    want=${entries[0]:0:64}
    name=${entries[0]:66}
    [ -f "$from_dist/$name" ] || die "$from_dist/$name is missing (SHA256SUMS lists it for $arch); nothing was changed"
    cp "$from_dist/$name" "$work/handnode"
    got=$(sha256sum <"$work/handnode" | cut -c1-64)
    [ "$got" = "$want" ] || die "$from_dist/$name does not match its SHA256SUMS entry (sha256 $got, \
listed $want): a damaged or tampered copy; nothing was changed"
    chmod 755 "$work/handnode"
    say "verified   $name (sha256 $want, for $machine)"
    binary=$work/handnode
elif [ -z "$binary" ]; then
    [ -f "$repo/Cargo.toml" ] || die "no --binary given and $repo is not a handnode checkout to build from"
    command -v cargo >/dev/null || die "no --binary given and cargo is not installed (https://rustup.rs, or pass --binary PATH)"
    say "building the release binary (cargo build --release) ..."
    (cd "$repo" && cargo build --release --locked --bin handnode) >&2 || die "cargo build failed (output above)"
    binary=$(cd "$repo" && cargo metadata --format-version 1 --no-deps \
        | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/handnode
fi
[ -f "$binary" ] && [ -x "$binary" ] || die "$binary is not an executable file"
"$binary" --version >/dev/null 2>&1 || die "$binary does not run on this machine (built for another architecture?)"

if [ -z "$prefix" ] && [ "$(id -u)" = 0 ]; then
    say "note: running as root installs for root's own user manager; run as the user whose box is lent"
fi

put "$binary" "$installed_bin" 755

# The route the next steps give: systemd's, or the one without it (asked for, or this box's).
without_systemd=$no_systemd
if [ "$no_systemd" = 0 ] && box_without_systemd; then
    say "this box does not run systemd (systemctl is-system-running: $(sd_state)): the units are installed but nothing will start them; the next steps say what does"
    without_systemd=1
fi

# Units: ExecStart points at the installed binary (kept as %h/... in the default layout).
# Without systemd an autostart entry takes their place.
units=()
if [ "$no_systemd" = 1 ]; then
    cat >"$work/handnode.desktop" <<DESKTOP
[Desktop Entry]
Type=Application
Name=handnode
Comment=Lends this box's tools to a coding agent (scripts/install.sh --no-systemd)
Exec=$installed_bin serve
Terminal=false
NoDisplay=true
X-GNOME-Autostart-enabled=true
DESKTOP
    put "$work/handnode.desktop" "$autostart" 644
    units+=("$autostart")
fi
# An enable link starts nothing without systemd, and says the opposite.
if [ "$without_systemd" = 1 ] && [ -L "$wants" ]; then
    rm -f "$wants"
    say "removed    $wants (an enable link: without systemd it starts nothing)"
    changed=1
fi
for src in "$repo"/contrib/systemd/*.service; do
    [ "$no_systemd" = 0 ] || break
    [ -e "$src" ] || die "no unit files in $repo/contrib/systemd"
    name=$(basename "$src")
    if [ "$name" = handnode.service ]; then
        exec_path=$installed_bin
        [ "$installed_bin" != "$HOME/.local/bin/handnode" ] || exec_path=%h/.local/bin/handnode
        grep -q '^ExecStart=%h/.local/bin/handnode' "$src" || die "$src has no 'ExecStart=%h/.local/bin/handnode' line to rewrite"
        sed "s|^ExecStart=%h/.local/bin/handnode|ExecStart=$exec_path|" "$src" >"$work/$name"
    else
        cp "$src" "$work/$name"
    fi
    put "$work/$name" "$unit_dir/$name" 644
    units+=("$unit_dir/$name")
done

# The list --uninstall works from. A file an earlier run installed that this one does not (a
# unit dropped from contrib/) is removed, since it was ours.
{ echo "$installed_bin"; printf '%s\n' "${units[@]}"; } >"$work/manifest"
if [ -f "$manifest" ]; then
    while IFS= read -r f; do
        [ -n "$f" ] || continue
        grep -qxF "$f" "$work/manifest" && continue
        rm -f "$f"
        say "removed    $f (installed earlier, not part of this install)"
        changed=1
    done <"$manifest"
fi
put "$work/manifest" "$manifest" 644

# Token: 256 random bits, hex. Written through a pipe and a 0600 temp file, renamed into place:
# never in argv, never on the terminal, never half-written.
if [ ! -d "$config_dir" ]; then
    mkdir -p "$(dirname "$config_dir")"
    mkdir -m 700 "$config_dir"
    changed=1
elif [ "$(stat -c %a "$config_dir")" != 700 ]; then
    chmod 700 "$config_dir"
    say "set mode 0700 on $config_dir"
    changed=1
fi
if [ -e "$token_file" ]; then
    if [ "$(stat -c %a "$token_file")" != 600 ]; then
        chmod 600 "$token_file"
        say "set mode 0600 on $token_file (existing token kept)"
        changed=1
    else
        say "unchanged  $token_file (existing token kept)"
    fi
    [ -s "$token_file" ] || say "warning: $token_file is empty; delete it and run this again for a new token"
else
    tmp=$(mktemp "$token_file.XXXXXX")
    chmod 600 "$tmp"
    od -An -v -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp"
    [ "$(wc -c <"$tmp")" = 64 ] || { rm -f "$tmp"; die "could not read 32 bytes from /dev/urandom"; }
    mv -f "$tmp" "$token_file"
    say "created    $token_file (0600; the token is not shown, read it from the file)"
    changed=1
fi

if [ "$changed" = 0 ]; then
    say "nothing changed: already installed"
fi

# Without systemd: start it by hand now; the autostart entry starts it at the next login.
if [ "$without_systemd" = 1 ]; then
    echo
    echo "Next steps (no systemd: the README's \"A box without systemd\"):"
    cat <<STEPS
  nohup $installed_bin serve >>"\$HOME/handnode.log" 2>&1 &   # start it now, in the background
  $installed_bin doctor         # says whether the daemon runs, where it listens, how many grants
STEPS
    if [ "$no_systemd" = 1 ]; then
        echo "  # $autostart starts it at your next desktop login"
    else
        echo "  # to start it at each desktop login: scripts/install.sh --no-systemd (an autostart entry instead of the units)"
    fi
    echo "  # on a box without a desktop, a crontab line (crontab -e) starts it at boot:"
    echo "  #   @reboot $installed_bin serve >>\$HOME/handnode.log 2>&1"
    case ":$PATH:" in
        *":$bin_dir:"*) ;;
        *) echo "  $bin_dir is not on your PATH: add it to use 'handnode grant' and friends" ;;
    esac
    exit 0
fi

# Reload a running user manager when it reads our unit directory (the default layout).
if [ "$changed" = 1 ] && [ -z "$prefix" ] && command -v systemctl >/dev/null \
    && systemctl --user daemon-reload 2>/dev/null; then
    say "reloaded the user manager"
    if systemctl --user is-active --quiet handnode.service 2>/dev/null; then
        say "handnode is running: systemctl --user restart handnode  to run the new version"
    fi
fi

# A unit outside the user manager's search path must be linked before it can be enabled, so
# that step comes first when it is needed.
case "$unit_dir" in
    "${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user" | "${XDG_DATA_HOME:-$HOME/.local/share}/systemd/user" \
        | /usr/local/share/systemd/user | /usr/share/systemd/user) link_first= ;;
    *) link_first="  systemctl --user link $unit_dir/handnode.service   # first: $unit_dir is not where a user manager looks" ;;
esac
echo
echo "Next steps:"
[ -z "$link_first" ] || echo "$link_first"
cat <<EOF
  sudo loginctl enable-linger "\$USER"        # run at boot and after logout, not only in a session
  systemctl --user daemon-reload
  systemctl --user enable --now handnode
  systemctl --user status handnode           # journalctl --user -u handnode for the log
EOF
case ":$PATH:" in
    *":$bin_dir:"*) ;;
    *) echo "  $bin_dir is not on your PATH: add it to use 'handnode grant' and friends" ;;
esac
if [ -e "$unit_dir/handnode-playwright.service" ]; then
    echo "  browser tools (optional): set up Playwright as in docs/upstream.md, then"
    echo "    systemctl --user enable --now handnode-playwright"
fi
