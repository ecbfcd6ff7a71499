#!/usr/bin/env bash
# Contract §26's proof, run by CI: a newcomer adds an observe tool that takes a path
# (scripts/ci/newcomer/disk_free.rs) to a scratch copy of this checkout as its module (the file
# and its `mod` line) plus one line in `tools::TOOLS`, runs the bless, and every tool-list,
# class, doc, layer and path-confinement check passes with nothing else edited by hand.
# Fails naming what else had to change.
#
# It builds in target/ (NEWCOMER_TARGET_DIR to change), so the dependencies are not built
# again; but cargo names a path package's artifacts the same wherever it lies, so the copy's
# builds replace the checkout's. CI runs this last for that reason, and the copy is removed
# at exit: its sources gone, cargo builds the checkout's own again the next time. Give a
# directory of its own when other builds share target/ meanwhile.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
target=${NEWCOMER_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}}
work=$root/target/newcomer
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
# The checkout as it is (tracked and new files, not what .gitignore ignores).
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work"
cd "$work"
git init -q
git add -A
git -c user.name=newcomer -c user.email=newcomer@localhost commit -qm "the checkout"

# The tool: its module, and the one line that registers it.
cp scripts/ci/newcomer/disk_free.rs src/tools/disk_free.rs
sed -i 's/^pub mod display;$/pub mod disk_free;\npub mod display;/' src/tools/mod.rs
awk '/^pub static TOOLS: / { in_tools = 1 }
     in_tools && /^\];$/ { print "    &disk_free::TOOL,"; in_tools = 0 }
     { print }' src/tools/mod.rs >src/tools/mod.rs.new && mv src/tools/mod.rs.new src/tools/mod.rs
[ "$(git diff --numstat src/tools/mod.rs)" = $'2\t0\tsrc/tools/mod.rs' ] || {
  echo "newcomer: the mod line and the TOOLS line did not go in as two lines:" >&2
  git diff src/tools/mod.rs >&2
  exit 1
}

export CARGO_TARGET_DIR=$target
echo "newcomer: HANDNODE_BLESS=1 cargo test (the generated docs)"
HANDNODE_BLESS=1 cargo test -q --test generated --test classes_doc
echo "newcomer: the list, class, doc, layer and confinement checks"
cargo test -q --test generated --test classes_doc --test readme --test protocol_doc \
  --test layers --test files
cargo test -q --lib -- tools:: profiles:: ops:: wire::mcp

# What changed: the module, its two lines, and files the bless wrote. Anything else is a
# place the newcomer would have had to know about.
git add -A
bad=0
while IFS= read -r path; do
  case $path in
    src/tools/disk_free.rs | src/tools/mod.rs) ;;
    README.md | ARCHITECTURE.md | docs/*.md | src/admin/console/index.html | src/admin/console/app.js)
      echo "newcomer: blessed $path" ;;
    *) echo "newcomer: $path changed, which no newcomer edits" >&2; bad=1 ;;
  esac
done < <(git diff --cached --name-only)
# The new tool shows where its kind is listed: the observe profile, the path tools.
grep -q '`disk_free`' README.md || { echo "newcomer: README does not name disk_free" >&2; bad=1; }
grep -q '| `disk_free` | observe |' docs/protocol.md || { echo "newcomer: the tools table lacks disk_free" >&2; bad=1; }
[ "$bad" = 0 ] || git diff --cached --stat >&2
exit "$bad"
