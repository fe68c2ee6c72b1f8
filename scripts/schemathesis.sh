#!/usr/bin/env bash
# Schemathesis (property-based API testing, from PyPI) against the OpenAPI document of a
# running `leasehold demo`: no 5xx; every response's status, content type, headers and body match
# the document; schema-valid requests are accepted and schema-invalid ones refused (negative
# data: values out of range, unknown body fields, wrong types, bodies without their JSON content
# type); a method a path does not list is a 405 with an `Allow` that names those it does. Installs a pinned Schemathesis into a venv under the cargo target directory (reused
# when present), builds and starts the demo on free ports in a scratch directory, waits for
# /readyz, runs a bounded number of examples within a time budget, stops the demo, and exits
# non-zero on any failure. Extra arguments go to `schemathesis run` (e.g. --seed, -n).
#
# POSTs with `"dry_run": false` really start rebalances and removals in the demo; that is fine.
# The demo-only controls are not in the document, so members are never crashed here.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
# Bounds: examples per operation, and the whole run (fuzzing repeats until it is spent).
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-25}
MAX_TIME=${SCHEMATHESIS_MAX_TIME:-90}

target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd)
venv="$target_dir/schemathesis-venv"
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -qF "$SCHEMATHESIS_VERSION"; then
  echo "== installing schemathesis $SCHEMATHESIS_VERSION into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

# With the integration-test target selected, dev-dependencies join feature resolution as under
# `cargo test`, so this reuses the test suite's build instead of compiling the dependencies a
# second time.
cargo build --locked --quiet --workspace --bin leasehold --test it
bin="$target_dir/debug/leasehold"

work=$(mktemp -d)
# shellcheck source=scripts/demo-lib.sh
. "$(dirname "$0")/demo-lib.sh"
trap 'demo_stop; rm -rf "$work"' EXIT
demo_start "$bin" "$work" --targets 60 || exit 1
echo "== schemathesis against $base/openapi.json"

# /events is a Server-Sent Events stream that never ends, so it is left out. Any bearer token
# is accepted on loopback (authentication `none`); without one Schemathesis sends made-up
# Authorization headers and gets only 401s — and, authentication being `none` there, the
# checks of requests without credentials (`ignored_auth`, `missing_required_header`) do not
# apply. scripts/schemathesis.toml holds what the document cannot say (valid page cursors; an
# Idempotency-Key reused with another body is a rightful 422). The mode is Schemathesis' default,
# `all`: positive and negative data. It runs in the target directory, where it keeps its cache
# of failures (.schemathesis/) to replay them first next time.
status=0
config=$(pwd)/scripts/schemathesis.toml
checks=not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance
checks=$checks,response_headers_conformance,positive_data_acceptance,negative_data_rejection
checks=$checks,unsupported_method,allow_header_conformance
(cd "$target_dir" && timeout $((MAX_TIME + 120)) "$venv/bin/schemathesis" --config-file "$config" \
  run "$base/openapi.json" \
  -H "Authorization: Bearer demo" \
  --checks "$checks" \
  --mode all \
  --exclude-path /events \
  --max-examples "$MAX_EXAMPLES" \
  --max-time "$MAX_TIME" \
  --request-timeout 40 \
  --workers 2 \
  --report junit --report-dir "$target_dir/schemathesis-report" \
  "$@") || status=$?

if ! kill -0 "$demo_pid" 2>/dev/null; then
  echo "the demo died during the run:"; tail -50 "$work/demo.log"; status=1
fi
if [ "$status" -ne 0 ]; then
  echo "schemathesis: FAILED (exit $status); the demo's log ends:"
  tail -20 "$work/demo.log"
fi
exit "$status"
