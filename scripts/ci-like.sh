#!/usr/bin/env bash
# Run .ci/run the way CI does, before submitting: a fresh clone of HEAD in a temp folder with
# ../shared beside it, CI=true, no standard input, and (the part a developer's shell hides)
# in session 0. CI's processes descend from an init that never calls setsid, so they sit in
# session 0, while a terminal's shell leads a session of its own; code that asks for its
# session (rustix's getsid cannot return 0 and panicked there) passes locally and fails in
# CI. A new PID namespace gives the same: its first process, and so everything under it, is
# in session 0.
#
#   scripts/ci-like.sh [LOG]     default log: <clone>/../ci.log; exit status is .ci/run's
# Needs root (unshare -p), like CI. Keeps the clone (its path is printed) for a look after,
# until the next run.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "$repo/.." && pwd)/shared
[ -d "$shared" ] || { echo "ci-like: no $shared beside the repository" >&2; exit 2; }
# The previous run's clone goes now: each holds a full target/ (several GB), and kept ones
# filled this machine's disk once.
rm -rf /tmp/handnode-ci.??????
work=$(mktemp -d /tmp/handnode-ci.XXXXXX)
# mktemp makes it 0700; a clone anywhere else is 0755, and the tests' other users (sway and
# its terminals run as nobody) need to pass through it.
chmod 0755 "$work"
git clone -q "$repo" "$work/main"
ln -s "$shared" "$work/shared"
log=${1:-$work/ci.log}
echo "ci-like: $(git -C "$work/main" log --oneline -1) in $work/main, log $log" >&2
cd "$work/main"
# bash as the namespace's init reaps what is orphaned under it, as CI's init does.
set +e
CI=true unshare --pid --fork --mount-proc \
    bash -c 'bash .ci/run <&- >"$1" 2>&1 & wait $!' _ "$log"
rc=$?
echo "ci-like: .ci/run exited $rc ($(grep -c '^== ' "$log") steps started; tail: $(tail -n 1 "$log"))" >&2
exit $rc
