#!/usr/bin/env bash
# The whole test suite: unit and property tests, HTTP/router tests, and the integration tests
# against the in-process Kubernetes simulator (kube-rs and kubectl over real HTTP).
# Ends with one total line, "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
