#!/usr/bin/env bash
# The real-Kubernetes tier: every integration test that talks to Kubernetes, run against a real
# kube-apiserver + etcd instead of the simulator, plus the differential tests that send the same
# request scripts to both and compare the answers (docs/real-apiserver.md, docs/fidelity.md),
# and the end-to-end scenarios on a whole cluster (the real controllers, scheduler and kwok).
#
#   scripts/test-real.sh            all of the tier
#   scripts/test-real.sh engine     only these: a simulator test target
#                                   (crates/kube-sim/tests/<name>.rs), an area of tests/it, or
#                                   `docs` (the docs' cluster blocks: docs-check.sh --cluster)
#
# Builds the control plane first (scripts/envtest.sh build: Go, through the Go module proxy;
# cached, about 20 minutes the first time). Each test target and area gets a fresh control plane
# (`scripts/envtest.sh run`, a few seconds to start), so they cannot see each other's objects;
# inside one every test has its own namespace (kube_sim::testkit).
# Extra cargo test arguments: LEASEHOLD_REAL_TEST_ARGS (e.g. "-- --test-threads=1").
# Ends with one total line, "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

# What talks to Kubernetes: the simulator crate's integration tests (sim_smoke, fidelity_*,
# kubectl, differential) and the areas of the product's tests/it (agent, engine, faults, managed_gnmic, managed_scrape, scrape_endpoints, the router
# tests whose engine watches it, deploy, which server-dry-runs every overlay and example,
# pressure: a slow API server under another client's load).
# Not here: the it areas demo (runs its own simulator: the demo is the simulator), browser (the
# dashboard in Chromium; its Kubernetes side is the same engine as ui), tls (no Kubernetes),
# and the unit tests.
SIM_TARGETS=(sim_smoke fidelity_api fidelity_apply fidelity_watch kubectl differential)
IT_AREAS=(agent engine shared_watch faults managed_gnmic managed_scrape scrape_endpoints overlap api ui idempotency metrics deploy pressure)
# Areas that need the whole cluster (kube-controller-manager, kube-scheduler, kwok's nodes:
# LEASEHOLD_ENVTEST_CLUSTER=1): the end-to-end scenarios on real StatefulSets, and the Helm
# chart installed, tested, upgraded and uninstalled (helm_install). The areas above
# run on kube-apiserver + etcd alone, with the simulator crate's kubelet loop in each test's
# namespace (kwok's nodes would run their pods too).
CLUSTER_AREAS=(statefulsets helm_install)
if (($# > 0)); then
  SIM_TARGETS=() IT_AREAS=() CLUSTER_AREAS=()
  for t in "$@"; do
    if [ -f "crates/kube-sim/tests/$t.rs" ]; then SIM_TARGETS+=("$t")
    elif [ "$t" = statefulsets ] || [ "$t" = helm_install ]; then CLUSTER_AREAS+=("$t")
    elif [ "$t" = docs ]; then :
    else IT_AREAS+=("$t"); fi
  done
fi

if ((${#CLUSTER_AREAS[@]})) || (($# == 0)) || [[ " $* " == *" docs "* ]]; then
  LEASEHOLD_ENVTEST_CLUSTER=1 scripts/envtest.sh build
else
  scripts/envtest.sh build
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
read -r -a extra <<<"${LEASEHOLD_REAL_TEST_ARGS:-}"
# Each test target, and each area of tests/it, gets a control plane of its own.
run_one() {
  local name=$1 start=$SECONDS
  shift
  echo "== real kube-apiserver: $name"
  scripts/envtest.sh run -- cargo test --locked --workspace "$@" 2>&1 | tee -a "$log" || status=1
  echo "== $name: $((SECONDS - start)) s"
}
# An area of tests/it: NAME AREA (the extra arguments already hold their `--`, if any).
run_area() {
  if ((${#extra[@]})); then run_one "$1" --test it "${extra[@]}" "$2::"
  else run_one "$1" --test it -- "$2::"; fi
}
for t in "${SIM_TARGETS[@]}"; do run_one "$t" --test "$t" "${extra[@]}"; done
for a in "${IT_AREAS[@]}"; do run_area "it $a" "$a"; done
for a in "${CLUSTER_AREAS[@]}"; do LEASEHOLD_ENVTEST_CLUSTER=1 run_area "it $a (whole cluster)" "$a"; done
# The docs' command blocks that need a real cluster, on one whole cluster (all at once, or
# when asked for by name: docs).
docs_counts=""
if (($# == 0)) || [[ " $* " == *" docs "* ]]; then
  echo "== real kube-apiserver: the docs' cluster blocks (scripts/docs-check.sh --cluster)"
  start=$SECONDS
  docs_log=$(mktemp)
  LEASEHOLD_ENVTEST_CLUSTER=1 scripts/envtest.sh run -- scripts/docs-check.sh --cluster 2>&1 |
    tee "$docs_log" || status=1
  docs_counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$docs_log" | tail -1 || true)
  rm -f "$docs_log"
  [ -n "$docs_counts" ] || { docs_counts="0 passed, 1 failed"; status=1; }
  echo "== docs: $((SECONDS - start)) s"
fi
awk -v docs="$docs_counts" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { split(docs, d, " "); p += d[1]; f += d[3]; printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
