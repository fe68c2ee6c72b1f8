#!/usr/bin/env bash
# Edit-build times of the test suite (docs/development.md): how long `cargo test --no-run`
# takes after a one-line edit of an engine file and after one of a dashboard template, each
# edit made twice and undone after each build (so every build starts from the same state).
# With --cold, first times a cold `cargo test --no-run` in a fresh target directory.
#
#   scripts/build-times.sh [--cold] [DIR]     DIR: a checkout (default: this one); compare two
#                                             commits with `git worktree add /tmp/old REV`
#
# Environment: ENGINE_FILE (default src/engine/placement.rs), TEMPLATE_FILE (default
# templates/cluster.html), CARGO_TARGET_DIR as usual. Run it on an otherwise idle machine.
set -euo pipefail
cold=0
if [ "${1:-}" = --cold ]; then cold=1; shift; fi
cd "${1:-$(dirname "$0")/..}"
engine=${ENGINE_FILE:-src/engine/placement.rs}
tmpl=${TEMPLATE_FILE:-templates/cluster.html}
saved=$(mktemp)
trap 'rm -f "$saved"' EXIT
secs() {
  local s e
  s=$(date +%s%N)
  "$@" >/dev/null 2>&1
  e=$(date +%s%N)
  awk -v s="$s" -v e="$e" 'BEGIN { printf "%.1f\n", (e - s) / 1e9 }'
}
build() { cargo test --locked --no-run -q; }
echo "checkout: $(pwd) at $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(nproc) cores"
if ((cold)); then
  dir=$(mktemp -d)
  echo "cold cargo test --no-run: $(CARGO_TARGET_DIR=$dir secs build) s (target dir $dir, removed)"
  rm -rf "$dir"
fi
build >/dev/null 2>&1
for round in 1 2; do
  for f in "$engine" "$tmpl"; do
    cp "$f" "$saved"
    case "$f" in *.rs) echo "// edited" >>"$f" ;; *) echo "" >>"$f" ;; esac
    t=$(secs build)
    cp "$saved" "$f"
    echo "round $round, after editing $f: cargo test --no-run $t s"
    build >/dev/null 2>&1
  done
done
