#!/usr/bin/env bash
# Produces the example scrape in docs/api.md: the simulator (with its fake kubelet), the control
# plane (`leasehold serve`, auth `none` on loopback) and one agent per member pod; two members
# take 12 targets, a third joins, a rebalance moves 4 targets to it, then one read, one unknown
# path and the scrape. Prints the scrape without the histogram buckets (`--all` keeps them).
# Needs kubectl. Ports: 16443 (simulator) and 18080 (HTTP); everything runs in a temp dir and
# is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q
target=${CARGO_TARGET_DIR:-target}
[[ $target = /* ]] || target=$PWD/$target
bin=$target/debug/leasehold
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cd "$dir"
export KUBECONFIG="$dir/kubeconfig"
"$bin" sim --listen 127.0.0.1:16443 --kubeconfig-out "$KUBECONFIG" --fake-kubelet >sim.log 2>&1 &
pids+=($!)
until [ -s "$KUBECONFIG" ] && kubectl get ns >/dev/null 2>&1; do
  kill -0 "${pids[0]}" || { cat sim.log >&2; exit 1; }
  sleep 0.2
done
kubectl create ns apps >/dev/null
member() {
  kubectl -n apps apply -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$1", "labels": {"app": "c"}},
 "spec": {"nodeName": "sim-node-1", "containers": [{"name": "m", "image": "busybox"}]}}
EOF
  "$bin" agent --cluster c --namespace apps --identity "$1" >"agent-$1.log" 2>&1 &
  pids+=($!)
}
cat >config.yaml <<EOF
database: sqlite:$dir/history.db
control_plane: {namespace: apps, lease_duration: 2s}
http: {listen: "127.0.0.1:18080", auth: {mode: none}}
clusters:
- name: c
  namespace: apps
  selector: {app: c}
  targets: {inline: [t-00, t-01, t-02, t-03, t-04, t-05, t-06, t-07, t-08, t-09, t-10, t-11]}
  policy: {lease_duration: 5s, on_join: "off"}
EOF
member c-0
member c-1
"$bin" serve --config config.yaml --identity cp-0 >serve.log 2>&1 &
pids+=($!)
api=http://127.0.0.1:18080
# Waits (at most 60 s) for a line of the scrape to match.
wait_for() {
  for _ in $(seq 120); do
    curl -sf "$api/metrics" | grep -q "$1" && return
    sleep 0.5
  done
  echo "timed out waiting for $1" >&2
  exit 1
}
wait_for '^leasehold_targets{cluster="c",state="owned"} 12$'
member c-2
sleep 4
curl -sf -X POST "$api/api/v1/clusters/c/rebalance" -H 'content-type: application/json' \
  -d '{"dry_run": false}' >/dev/null
wait_for '^leasehold_moves_total{.*outcome="done"} 4$'
curl -sf "$api/api/v1/clusters/c" >/dev/null
curl -s "$api/no/such/path" >/dev/null
if [ "${1:-}" = "--all" ]; then
  curl -s "$api/metrics"
else
  curl -s "$api/metrics" | grep -v '_bucket{'
fi
