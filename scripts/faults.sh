#!/usr/bin/env bash
# The fault suite (tests/it/faults.rs) with many seeds: a protocol v2 cluster of real
# `leasehold agent` processes and the control plane, each scenario (member SIGKILL, SIGTERM,
# SIGSTOP past its hold; control plane killed mid-rebalance; its API connection blackholed or
# refused) run once per seed, checking work-level overlaps, targets unowned past the bound, and
# history. CI runs the same tests with one seed, on both tiers.
#
#   scripts/faults.sh            5 seeds on the simulator
#   scripts/faults.sh 20         20 seeds
#   scripts/faults.sh 20 --real  20 seeds on the real kube-apiserver + etcd (scripts/envtest.sh)
#
# A failure names its seed; rerun that one with LEASEHOLD_FAULT_SEED=<seed> scripts/faults.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-5}
case "$seeds" in *[!0-9]*|'') echo "usage: scripts/faults.sh [SEEDS] [--real]" >&2; exit 2 ;; esac
export LEASEHOLD_FAULT_SEEDS=$seeds
if [ "${2:-}" = --real ]; then
  exec scripts/test-real.sh faults
elif [ -n "${2:-}" ]; then
  echo "usage: scripts/faults.sh [SEEDS] [--real]" >&2
  exit 2
fi
exec cargo test --locked -p leasehold --test it -- faults:: --test-threads=1 --nocapture
