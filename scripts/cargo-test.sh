#!/usr/bin/env bash
# The workspace's cargo tests, grouped as they were written to run (docs/development.md):
#
#   1. unit tests of both crates (`--lib --bins`: the planner, index, store, protocol, the
#      simulator's apply/selector/protobuf/... modules);
#   2. the simulator crate's integration tests (crates/kube-sim/tests/*.rs, one binary each);
#   3. the product's integration tests (tests/it, one binary), one area (module) at a time: the
#      heavy areas (agents renewing hundreds of Leases, the whole demo, Chromium) starve each
#      other's renewals side by side on a 2-core machine.
#
#   scripts/cargo-test.sh                  all of it
#   scripts/cargo-test.sh --areas          the areas of tests/it, one per line
#   scripts/cargo-test.sh ARGS...          `cargo test --locked --no-fail-fast ARGS...` instead
#
# Every cargo call selects the whole workspace, so dependency features resolve once, as for a
# plain `cargo test`, and nothing is compiled twice. Prints cargo's own `test result:` lines
# (scripts/test.sh and scripts/test-real.sh add them up).
set -uo pipefail
cd "$(dirname "$0")/.."

cargo_test=(cargo test --locked --no-fail-fast --workspace)

# The areas of tests/it: the first segment of every test's path. Fails if a filter `AREA::`
# would also select tests of another area (a nested module of the same name).
it_areas() {
  local list
  list=$("${cargo_test[@]}" -q --test it -- --list --format terse 2>/dev/null |
    sed -n 's/: test$//p') || return 1
  [ -n "$list" ] || { echo "cargo-test.sh: no tests found in tests/it" >&2; return 1; }
  local areas a
  areas=$(sed -n 's/^\([a-z0-9_]*\)::.*/\1/p' <<<"$list" | sort -u)
  for a in $areas; do
    if [ "$(grep -c "^$a::" <<<"$list")" != "$(grep -c "$a::" <<<"$list")" ]; then
      echo "cargo-test.sh: the filter '$a::' would select tests outside the area $a" >&2
      return 1
    fi
  done
  echo "$areas"
}

# The integration-test targets other than tests/it (the simulator crate's).
other_test_targets() {
  cargo metadata --locked --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if t["kind"] == ["test"] and t["name"] != "it":
            print(t["name"])'
}

if (($# > 0)); then
  if [ "$1" = --areas ]; then it_areas; exit; fi
  exec "${cargo_test[@]}" "$@"
fi

status=0
echo "== unit tests (both crates)"
"${cargo_test[@]}" --lib --bins || status=1
targets=()
for t in $(other_test_targets); do targets+=(--test "$t"); done
echo "== the simulator's integration tests (${targets[*]})"
"${cargo_test[@]}" "${targets[@]}" || status=1
areas=$(it_areas) || exit 1
for a in $areas; do
  echo "== tests/it: $a"
  start=$SECONDS
  "${cargo_test[@]}" --test it -- "$a::" || status=1
  echo "== tests/it $a: $((SECONDS - start)) s"
done
exit "$status"
