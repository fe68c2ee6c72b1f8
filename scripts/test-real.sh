#!/usr/bin/env bash
# The real-Kubernetes tier: every integration test that talks to Kubernetes, run against a real
# kube-apiserver + etcd instead of the simulator, plus the differential tests that send the same
# request scripts to both and compare the answers (docs/real-apiserver.md, docs/fidelity.md).
#
#   scripts/test-real.sh            all of the tier
#   scripts/test-real.sh engine     only these test targets (tests/<name>.rs)
#
# Builds the control plane first (scripts/envtest.sh build: Go, through the Go module proxy;
# cached, about 20 minutes the first time). Each test target gets a fresh control plane
# (`scripts/envtest.sh run`, a few seconds to start), so targets cannot see each other's objects;
# inside a target every test has its own namespace (tests/common/mod.rs).
# Extra cargo test arguments: LEASEHOLD_REAL_TEST_ARGS (e.g. "-- --test-threads=1").
# Ends with one total line, "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

# The targets that talk to Kubernetes (the router tests watch it through a real engine too;
# deploy server-dry-runs every overlay and example).
# Not here: demo (runs its own simulator: the demo is the simulator), browser (the dashboard
# in Chromium; its Kubernetes side is the same engine as ui.rs), tls (no Kubernetes).
TARGETS=(sim_smoke fidelity_api fidelity_apply fidelity_watch kubectl differential
  agent engine http ui idempotency metrics deploy)
if (($# > 0)); then TARGETS=("$@"); fi

scripts/envtest.sh build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
read -r -a extra <<<"${LEASEHOLD_REAL_TEST_ARGS:-}"
for t in "${TARGETS[@]}"; do
  echo "== real kube-apiserver: cargo test --test $t"
  start=$SECONDS
  scripts/envtest.sh run -- cargo test --locked --test "$t" "${extra[@]}" 2>&1 | tee -a "$log" ||
    status=1
  echo "== $t: $((SECONDS - start)) s"
done
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
