#!/usr/bin/env bash
# The wall's attack tests (tests/walls.rs, contract §21) and the admin-origin spellings
# against the real Playwright MCP (tests/chains.rs) as an unprivileged user, beside the root
# run of `cargo test`: the daemon as root must never be the only way they run.
#
# Creates the user `hn-lender` (once), gives it a cgroup subtree of its own in every
# hierarchy handnode uses, chowned to it as systemd's Delegate=yes would (where the box
# allows it), moves itself there, and runs the compiled test binaries as that user. Prints
# what it skipped and why; fails when a test fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
user=hn-lender

if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED the unprivileged run: it creates the user $user and needs root for that"
  exit 0
fi
id -u "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
uid=$(id -u "$user") gid=$(id -g "$user")

# What runs as the user: the wall's red team, and the admin-origin spellings against the real
# Playwright MCP and chromium (tests/chains.rs; it says SKIPPED where they are not installed).
runs=("walls" "chains the_chains_fail_for_every_browser_boundary_with_bwrap")
declare -A bins
built=$(cargo test --test walls --test chains --no-run --message-format=json 2>/dev/null |
  jq -r 'select(.executable != null) | "\(.target.name) \(.executable)"')
while read -r name path; do bins[$name]=$path; done <<<"$built"
for run in "${runs[@]}"; do
  name=${run%% *}
  [ -x "${bins[$name]:-}" ] || { echo "the $name test binary was not built" >&2; exit 1; }
  # The user reads the binary where cargo put it (and nothing else of the checkout).
  chmod o+rx "${bins[$name]}"
done

# pasta opens /dev/net/tun as the user: Debian's udev makes it 0666, some containers 0600.
if [ -c /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
  echo "/dev/net/tun is $(stat -c %a /dev/net/tun) here; making it 0666 as Debian's udev rule does"
  chmod 0666 /dev/net/tun
fi

# A delegated subtree: in each hierarchy, a group beside this shell's own, chowned to the
# user (the group, its cgroup.procs and, on v2, cgroup.subtree_control and cgroup.threads).
groups=()
skipped=()
delegate() { # $1: the hierarchy's mount point, $2: this shell's path in it
  local g="$1${2%/}/hn-lender-$$"
  if mkdir "$g" 2>/dev/null; then
    chown "$uid:$gid" "$g"
    for f in cgroup.procs cgroup.subtree_control cgroup.threads tasks; do
      [ -e "$g/$f" ] && chown "$uid:$gid" "$g/$f"
    done
    groups+=("$g")
  else
    skipped+=("$1 (cannot create a group there)")
  fi
}
while IFS=: read -r _ controllers path; do
  case "$controllers" in
  "") if [ -f /sys/fs/cgroup/cgroup.controllers ]; then delegate /sys/fs/cgroup "$path"
      elif [ -d /sys/fs/cgroup/unified ]; then delegate /sys/fs/cgroup/unified "$path"; fi ;;
  *memory* | *pids*) delegate "/sys/fs/cgroup/$controllers" "$path" ;;
  cpu | cpu,cpuacct | cpuacct,cpu) delegate "/sys/fs/cgroup/$controllers" "$path" ;;
  esac
done </proc/self/cgroup
# On a pure v2 box the controllers must be enabled for the user's group to hand on.
if [ -f /sys/fs/cgroup/cgroup.controllers ] && [ "${#groups[@]}" -gt 0 ]; then
  for c in memory pids cpu; do
    echo "+$c" >"$(dirname "${groups[0]}")/cgroup.subtree_control" 2>/dev/null ||
      skipped+=("the $c controller for the user's group (the parent has processes of its own)")
  done
fi
cleanup() { for g in "${groups[@]}"; do rmdir "$g" 2>/dev/null || true; done; }
trap cleanup EXIT
for s in "${skipped[@]}"; do echo "SKIPPED delegating $s: handnode falls back where it must"; done
echo "running as $user (uid $uid) in: ${groups[*]:-no delegated group}"

# Into the groups (as root, which may move a process anywhere), then down to the user.
# `env -i`: nothing of root's environment (HOME, XDG_*, a display) comes along.
status=0
for run in "${runs[@]}"; do
  name=${run%% *} filter=${run#"$name"}
  echo "== tests/$name.rs${filter:+ (}${filter# }${filter:+)} as $user"
  (
    for g in "${groups[@]}"; do echo $BASHPID >"$g/cgroup.procs"; done
    # shellcheck disable=SC2086 # the filter is one word or none
    exec setpriv --reuid="$uid" --regid="$gid" --init-groups \
      env -i HOME="/home/$user" USER="$user" LOGNAME="$user" PATH=/usr/local/bin:/usr/bin:/bin \
      TMPDIR=/tmp RUST_BACKTRACE=1 "${bins[$name]}" --test-threads=2 $filter
  ) || status=$?
done
exit "$status"
