#!/usr/bin/env bash
# Runs the commands of the user docs, so they stay true: every ```sh block of the files below,
# in order, one bash per file (variables carry from block to block), under `set -euo pipefail`,
# against a fresh `leasehold demo` started for that file on free ports. `localhost:8080` in a
# block becomes the demo's address, KUBECONFIG is the demo's simulated Kubernetes API, the
# working directory is the repository (so `kubectl apply -k deploy/...` works), and `leasehold`
# is the binary just built. A block right after a line `<!-- docs-check: skip (why) -->` is not
# run (it needs a container engine, a running Leasehold, or runs forever); the reason is printed.
# Ends with "N passed, N failed" counting blocks; exits non-zero if any block failed.
#
# Blocks that need a real cluster run on the whole-cluster tier instead (the real controllers,
# scheduler and kwok's nodes: docs/real-apiserver.md), with --cluster:
#   <!-- docs-check: cluster -->             runs against the demo and on the cluster
#   <!-- docs-check: cluster only (why) -->  runs only on the cluster (why: not against the demo)
# With --cluster only those blocks run, file by file in the order below, all on the one cluster
# LEASEHOLD_TEST_KUBECONFIG names (a file's blocks may rely on an earlier file's), with no demo:
#   LEASEHOLD_ENVTEST_CLUSTER=1 scripts/envtest.sh run -- scripts/docs-check.sh --cluster
#
#   scripts/docs-check.sh [--cluster] [FILE...]   (default: the files listed below)
#   DOCS_CHECK_VERBOSE=1 prints every block's output.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=demo
if [ "${1:-}" = --cluster ]; then
  mode=cluster
  shift
  if [ "${LEASEHOLD_TEST_CLUSTER:-}" != 1 ] || [ -z "${LEASEHOLD_TEST_KUBECONFIG:-}" ]; then
    echo "docs-check --cluster: run it on the whole-cluster tier:" \
      "LEASEHOLD_ENVTEST_CLUSTER=1 scripts/envtest.sh run -- scripts/docs-check.sh --cluster" >&2
    exit 2
  fi
fi

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(README.md docs/getting-started.md docs/concepts.md docs/api.md docs/runbook.md
         docs/security.md docs/configuration.md deploy/README.md deploy/examples/worker-pool/README.md
         deploy/examples/mmr/README.md deploy/examples/gnmic/README.md
         deploy/examples/gnmic-observed/README.md deploy/examples/prometheus/README.md
         deploy/examples/otel-collector/README.md)
fi
for tool in kubectl curl jq python3; do
  command -v "$tool" >/dev/null || { echo "docs-check: $tool is required" >&2; exit 1; }
done

target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd)
# As scripts/schemathesis.sh: selecting the integration-test target reuses the test suite's build.
cargo build --locked --quiet --workspace --bin leasehold --test it
bin="$target_dir/debug/leasehold"

work=$(mktemp -d)
mkdir -p "$work/bin"
ln -s "$bin" "$work/bin/leasehold"
# shellcheck source=scripts/demo-lib.sh
. "$(dirname "$0")/demo-lib.sh"
trap 'demo_stop; rm -rf "$work"' EXIT

# Starts a demo in $1 (60 collector targets) and sets $base once it is ready and every target
# has an owner.
start_demo() {
  demo_start "$bin" "$1" --targets 60 || return 1
  for _ in $(seq 1 240); do
    if [ "$(curl -s "$base/api/v1/clusters/collector/targets?state=owned&limit=1" | jq -r .total 2>/dev/null)" = 60 ] &&
       [ "$(curl -s "$base/api/v1/clusters/replicas/targets?state=owned&limit=1" | jq -r .total 2>/dev/null)" = 8 ]; then
      return 0
    fi
    sleep 0.25
  done
  echo "the demo's targets never all got owners"; tail -30 "$1/demo.log"; return 1
}

passed=0 failed=0 skipped=0
n=0
for file in "${files[@]}"; do
  n=$((n + 1))
  script="$work/$n.sh"
  # Extract the blocks: one bash script per file, each block announced; skipped ones listed.
  python3 - "$file" "$script" "$mode" >"$work/$n.skipped" <<'PY'
import re, sys
path, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(path, encoding="utf-8").read().split("\n")
parts, i = [], 0
while i < len(lines):
    m = re.match(r"^```(\w*)\s*$", lines[i])
    if not m:
        i += 1
        continue
    j = i + 1
    while j < len(lines) and not lines[j].startswith("```"):
        j += 1
    k = i - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    marker = lines[k].strip() if k >= 0 else ""
    if m.group(1) in ("sh", "bash", "shell"):
        cluster_only = marker.startswith("<!-- docs-check: cluster only")
        on_cluster = cluster_only or marker == "<!-- docs-check: cluster -->"
        if marker.startswith("<!-- docs-check: skip"):
            why = marker[len("<!-- docs-check: skip"):].rstrip("->").strip()
            if mode == "demo":
                print(f"{path}:{i + 1}: skipped {why}")
        elif mode == "cluster" and not on_cluster:
            pass
        elif mode == "demo" and cluster_only:
            why = marker[len("<!-- docs-check: cluster only"):].rstrip("->").strip()
            print(f"{path}:{i + 1}: skipped here, runs on the whole-cluster tier (--cluster) {why}")
        else:
            body = "\n".join(lines[i + 1:j])
            parts.append(f"printf '\\n--- %s\\n' '{path}:{i + 1}'\n{body}\nprintf '\\n+++ %s\\n' '{path}:{i + 1}'")
    i = j + 1
with open(out, "w", encoding="utf-8") as f:
    f.write("set -euo pipefail\n" + "\n".join(parts) + "\n")
PY
  blocks=$(grep -c "^printf '\\\\n--- " "$script" || true)
  skips=$(wc -l <"$work/$n.skipped")
  skipped=$((skipped + skips))
  sed 's/^/  /' "$work/$n.skipped"
  if [ "$blocks" -eq 0 ]; then
    echo "== $file: no block to run"
    continue
  fi
  status=0
  if [ "$mode" = cluster ]; then
    echo "== $file: $blocks blocks on the whole cluster"
    (cd "$root" && PATH="$work/bin:$PATH" KUBECONFIG="$LEASEHOLD_TEST_KUBECONFIG" \
      timeout 600 bash "$script") >"$work/$n.out" 2>&1 || status=$?
  else
    echo "== $file: $blocks blocks against a fresh demo"
    start_demo "$work/demo-$n" || { failed=$((failed + blocks)); demo_stop; continue; }
    host=${base#http://}
    sed -i "s|localhost:8080|$host|g; s|127\.0\.0\.1:8080|$host|g" "$script"
    (cd "$root" && PATH="$work/bin:$PATH" KUBECONFIG="$work/demo-$n/state/kubeconfig" \
      timeout 600 bash "$script") >"$work/$n.out" 2>&1 || status=$?
  fi
  [ -z "${DOCS_CHECK_VERBOSE:-}" ] || sed 's/^/    /' "$work/$n.out"
  ok=$(grep -c "^+++ " "$work/$n.out" || true)
  passed=$((passed + ok))
  if [ "$status" -ne 0 ]; then
    failed=$((failed + blocks - ok))
    echo "docs-check: $file: block $(grep "^--- " "$work/$n.out" | tail -1 | cut -c5-) failed (exit $status):"
    tail -40 "$work/$n.out" | sed 's/^/    /'
    if [ "$mode" = cluster ]; then
      # What the cluster looked like then: a block that waits (rollout status) fails on a
      # pod that never became Ready, and the reason is in its pod, claim or node.
      echo "    the cluster after the failure:"
      KUBECONFIG="$LEASEHOLD_TEST_KUBECONFIG" kubectl get nodes,pv,pvc,pods -A -o wide 2>&1 | sed 's/^/    /' || true
      KUBECONFIG="$LEASEHOLD_TEST_KUBECONFIG" kubectl get events -A --sort-by=.lastTimestamp 2>&1 |
        tail -30 | sed 's/^/    /' || true
    fi
  fi
  demo_stop
done
if [ "$mode" = demo ]; then
  echo "docs-check: $skipped blocks skipped (reasons above)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
