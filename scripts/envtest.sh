#!/usr/bin/env bash
# Real-control-plane test tier: builds, caches, starts and stops a real etcd + kube-apiserver on
# loopback, so tests can check that the simulator (crates/kube-sim) tells the truth (like envtest for
# controller-runtime). Everything is built from source through the Go module proxy.
#
#   scripts/envtest.sh build            build (or reuse cached) kube-apiserver and etcd
#   scripts/envtest.sh start DIR        start etcd + kube-apiserver, state and logs in DIR;
#                                       prints DIR/kubeconfig
#   scripts/envtest.sh stop DIR         stop both and remove DIR's state (logs are kept)
#   scripts/envtest.sh run -- CMD...    build, start in a temp dir, run CMD with
#                                       LEASEHOLD_TEST_KUBECONFIG set, stop; exits with CMD's status
#
# Environment:
#   LEASEHOLD_ENVTEST_CACHE   binary cache (default: $HOME/.cache/leasehold-envtest)
#   LEASEHOLD_ENVTEST_KEEP=1  `run` keeps its temp dir (logs) instead of deleting it
#   LEASEHOLD_ENVTEST_APISERVER_ARGS  extra kube-apiserver flags (space-separated; later ones win)
#   LEASEHOLD_ENVTEST_CLUSTER=1  also build and start kube-controller-manager, kube-scheduler
#                             and kwok with 3 fake nodes (a whole cluster but for containers);
#                             `run` then exports LEASEHOLD_TEST_CLUSTER=1
#
# Without LEASEHOLD_ENVTEST_CLUSTER no controller-manager and no scheduler run: namespaces stay
# Terminating after delete, no garbage collection, no service-account tokens, pods are never
# scheduled.
set -euo pipefail

# k8s.io/kubernetes release to build kube-apiserver from. Its staging modules (k8s.io/api,
# apimachinery, apiserver, ...) are published separately as v0.<minor>.<patch>. v1.33.13, not an
# earlier 1.33 patch: it is the 1.33 release whose whole staging set this machine's Go module proxy
# serves (at v1.33.5, endpointslice/externaljwt are "not available" and cloud-provider/
# csi-translation-lib fail the checksum-database lookup).
KUBE_VERSION=v1.33.13
STAGING_VERSION=v0.${KUBE_VERSION#v1.}
# What k8s.io/kubernetes v1.33.x's go.mod requires for go.etcd.io/etcd/client/v3 (and what
# kubeadm 1.33 deploys).
ETCD_VERSION=v3.5.21

CACHE="${LEASEHOLD_ENVTEST_CACHE:-$HOME/.cache/leasehold-envtest}"
KUBE_DIR="$CACHE/kube-$KUBE_VERSION"
ETCD_DIR="$CACHE/etcd-$ETCD_VERSION"
KUBE_APISERVER="$KUBE_DIR/bin/kube-apiserver"
KUBE_CONTROLLER_MANAGER="$KUBE_DIR/bin/kube-controller-manager"
KUBE_SCHEDULER="$KUBE_DIR/bin/kube-scheduler"
ETCD="$ETCD_DIR/bin/etcd"
# Fake nodes kwok runs (LEASEHOLD_ENVTEST_CLUSTER=1).
KWOK_NODES=3
# Feature gates of the whole-cluster tier (kube-apiserver and kube-controller-manager).
CLUSTER_FEATURE_GATES=MaxUnavailableStatefulSet=true
# kwok: a release that builds with the machine's Go (v0.8.0 needs Go 1.26).
KWOK_VERSION=v0.8.0
KWOK_DIR="$CACHE/kwok-$KWOK_VERSION"
KWOK="$KWOK_DIR/bin/kwok"

# Fixed test identities (loopback-only, throwaway control plane). Only admin has RBAC grants.
ADMIN_TOKEN=leasehold-admin-token
VIEWER_TOKEN=viewer-token
NOBODY_TOKEN=nobody-token

log() { printf 'envtest: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------------------------------------
# build

# gobuild_env, quiet
. "$(dirname "${BASH_SOURCE[0]}")/go-build-lib.sh"

# Version stamping as in kubernetes' hack/lib/version.sh, so /version reports $KUBE_VERSION.
kube_ldflags() {
  local ldflags="-s -w" kv key val pkg date
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for kv in "gitVersion=$KUBE_VERSION" "gitMajor=1" "gitMinor=$(cut -d. -f2 <<<"$KUBE_VERSION")" \
    "gitTreeState=clean" "buildDate=$date"; do
    key=${kv%%=*} val=${kv#*=}
    for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
      ldflags+=" -X $pkg.$key=$val"
    done
  done
  echo "$ldflags"
}

build_kube_apiserver() {
  if [[ -x "$KUBE_APISERVER" ]]; then
    log "kube-apiserver $KUBE_VERSION: cached at $KUBE_APISERVER"
    return
  fi
  local start=$SECONDS src="$KUBE_DIR/src" gomod replaces
  mkdir -p "$src" "$KUBE_DIR/bin"
  log "kube-apiserver $KUBE_VERSION: building (this takes a long while the first time)"

  # k8s.io/kubernetes replaces its staging modules (k8s.io/api, apimachinery, ...) with
  # ./staging/src/k8s.io/..., which is not in the module zip: map each to its published version.
  gomod=$(cd "$src" && gobuild_env go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  [[ -f "$gomod" ]] || die "could not download k8s.io/kubernetes@$KUBE_VERSION"
  local mod
  replaces=""
  while read -r mod; do
    replaces+=$'\t'"$mod => $mod $STAGING_VERSION"$'\n'
  done < <(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$gomod")
  [[ -n "$replaces" ]] || die "no staging replace block found in $gomod"
  cat >"$src/go.mod" <<EOF
// Generated by scripts/envtest.sh: throwaway module to build kube-apiserver $KUBE_VERSION.
module leasehold.invalid/envtest-kube

go 1.24.0

godebug default=go1.24

require k8s.io/kubernetes $KUBE_VERSION

replace (
$replaces)
EOF
  : >"$src/go.sum"
  (cd "$src" && quiet gobuild_env go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION")

  (cd "$src" && gobuild_env go build -ldflags "$(kube_ldflags)" -o "$KUBE_APISERVER.tmp" \
    k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$KUBE_APISERVER.tmp" "$KUBE_APISERVER"
  log "kube-apiserver $KUBE_VERSION: built in $((SECONDS - start))s -> $KUBE_APISERVER"
}

# kube-controller-manager or kube-scheduler, from the module kube-apiserver was built in (same
# release, same staging versions, same version stamp).
build_kube_component() {
  local name=$1 bin="$KUBE_DIR/bin/$1" src="$KUBE_DIR/src" start=$SECONDS
  if [[ -x "$bin" ]]; then
    log "$name $KUBE_VERSION: cached at $bin"
    return
  fi
  log "$name $KUBE_VERSION: building"
  [[ -f "$src/go.mod" ]] || die "no $src/go.mod: remove $KUBE_APISERVER to rebuild it (and its module)"
  (cd "$src" && quiet gobuild_env go get "k8s.io/kubernetes/cmd/$name@$KUBE_VERSION")
  (cd "$src" && gobuild_env go build -ldflags "$(kube_ldflags)" -o "$bin.tmp" \
    "k8s.io/kubernetes/cmd/$name")
  mv "$bin.tmp" "$bin"
  log "$name $KUBE_VERSION: built in $((SECONDS - start))s -> $bin"
}

# kwok (fake nodes and kubelets: makes scheduled pods Running and Ready with IPs, heartbeats node
# Leases) and its stock "fast" stages, as kwokctl configures them.
build_kwok() {
  if [[ -x "$KWOK" && -d "$KWOK_DIR/stages" ]]; then
    log "kwok $KWOK_VERSION: cached at $KWOK"
    return
  fi
  local start=$SECONDS src="$KWOK_DIR/src" dir go_minor
  go_minor=$(go env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
  ((${go_minor:-0} >= 26)) || die "kwok $KWOK_VERSION needs Go 1.26 or later (found $(go env GOVERSION))"
  mkdir -p "$src" "$KWOK_DIR/bin"
  log "kwok $KWOK_VERSION: building"
  printf '%s\n' "// Generated by scripts/envtest.sh: throwaway module to build kwok $KWOK_VERSION." \
    "module leasehold.invalid/envtest-kwok" "" "go 1.26.0" >"$src/go.mod"
  : >"$src/go.sum"
  (cd "$src" && quiet gobuild_env go get "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
  (cd "$src" && gobuild_env go build \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    -o "$KWOK.tmp" sigs.k8s.io/kwok/cmd/kwok)
  dir=$(cd "$src" && gobuild_env go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  [[ -d "$dir/kustomize/stage" ]] || die "kwok's stages not found under $dir"
  rm -rf "$KWOK_DIR/stages.tmp"
  mkdir -p "$KWOK_DIR/stages.tmp"
  cp "$dir/kustomize/stage/node/fast/node-initialize.yaml" \
    "$dir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
    "$dir/kustomize/stage/pod/fast/pod-ready.yaml" \
    "$dir/kustomize/stage/pod/fast/pod-complete.yaml" \
    "$dir/kustomize/stage/pod/fast/pod-delete.yaml" "$KWOK_DIR/stages.tmp/"
  chmod -R u+w "$KWOK_DIR/stages.tmp"
  rm -rf "$KWOK_DIR/stages"
  mv "$KWOK_DIR/stages.tmp" "$KWOK_DIR/stages"
  mv "$KWOK.tmp" "$KWOK"
  log "kwok $KWOK_VERSION: built in $((SECONDS - start))s -> $KWOK"
}

build_etcd() {
  if [[ -x "$ETCD" ]]; then
    log "etcd $ETCD_VERSION: cached at $ETCD"
    return
  fi
  local start=$SECONDS src="$ETCD_DIR/src"
  mkdir -p "$src" "$ETCD_DIR/bin"
  log "etcd $ETCD_VERSION: building"
  # go.etcd.io/etcd/server/v3's root package is etcd's main (etcdmain.Main). Its go.mod
  # replaces its sibling modules with ../api etc., so `go install pkg@version` refuses it:
  # build from a throwaway module that requires the published siblings instead.
  cat >"$src/go.mod" <<EOF
// Generated by scripts/envtest.sh: throwaway module to build etcd $ETCD_VERSION.
module leasehold.invalid/envtest-etcd

go 1.23.0
EOF
  : >"$src/go.sum"
  local v2="v2.305.${ETCD_VERSION##*.}"
  (cd "$src" && quiet gobuild_env go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    "go.etcd.io/etcd/api/v3@$ETCD_VERSION" "go.etcd.io/etcd/client/pkg/v3@$ETCD_VERSION" \
    "go.etcd.io/etcd/client/v3@$ETCD_VERSION" "go.etcd.io/etcd/client/v2@$v2" \
    "go.etcd.io/etcd/pkg/v3@$ETCD_VERSION" "go.etcd.io/etcd/raft/v3@$ETCD_VERSION")
  (cd "$src" && gobuild_env go build -ldflags "-s -w" -o "$ETCD.tmp" go.etcd.io/etcd/server/v3)
  mv "$ETCD.tmp" "$ETCD"
  log "etcd $ETCD_VERSION: built in $((SECONDS - start))s -> $ETCD"
}

cmd_build() {
  command -v go >/dev/null || die "go is not installed"
  mkdir -p "$CACHE"
  local start=$SECONDS
  # One build at a time per cache (parallel test runs would otherwise both build).
  exec 9>"$CACHE/.build.lock"
  flock 9
  build_etcd
  build_kube_apiserver
  if [[ ${LEASEHOLD_ENVTEST_CLUSTER:-} == 1 ]]; then
    build_kube_component kube-controller-manager
    build_kube_component kube-scheduler
    build_kwok
  fi
  exec 9>&- # release the lock; the control plane must not inherit the fd
  log "build: done in $((SECONDS - start))s (cache: $CACHE)"
}

# ---------------------------------------------------------------------------------------------
# start / stop

free_port() {
  local p
  if p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null); then
    echo "$p"
    return
  fi
  while :; do
    p=$((20000 + RANDOM % 30000))
    ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
}

gen_certs() {
  local d=$1
  (
    cd "$d"
    umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 \
      -keyout ca.key -out ca.crt -subj "/CN=leasehold-envtest-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    cat >apiserver.ext <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1
EOF
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f apiserver.csr apiserver.ext ca.srl
  )
}

write_kubeconfig() {
  local d=$1 port=$2 ca
  ca=$(base64 -w0 <"$d/ca.crt")
  cat >"$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $ADMIN_TOKEN
- name: viewer
  user:
    token: $VIEWER_TOKEN
- name: nobody
  user:
    token: $NOBODY_TOKEN
contexts:
- name: admin
  context: {cluster: envtest, user: admin}
- name: viewer
  context: {cluster: envtest, user: viewer}
- name: nobody
  context: {cluster: envtest, user: nobody}
current-context: admin
EOF
  chmod 600 "$d/kubeconfig"
}

# Processes must be ours before we signal them (pids can be reused).
is_ours() {
  local pid=$1 bin=$2
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$bin"
}

# Alive and not a zombie. Unlike is_ours, true from the fork on: right after `setsid BIN &` the
# child may still be a copy of this shell, not yet exec'd into BIN.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != [ZX] ]]
}

stop_pid() {
  local pid=$1 bin=$2 i
  is_ours "$pid" "$bin" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    is_ours "$pid" "$bin" || return 0
    sleep 0.1
  done
  log "$(basename "$bin") (pid $pid) ignored SIGTERM for 10s, killing"
  kill -KILL "$pid" 2>/dev/null || true
}

wait_http() { # url timeout_s pid what [curl args...]
  local url=$1 timeout=$2 pid=$3 what=$4 deadline
  shift 4
  deadline=$((SECONDS + timeout))
  until curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null; do
    alive "$pid" || { log "$what exited during startup"; return 1; }
    ((SECONDS < deadline)) || { log "$what not ready after ${timeout}s"; return 1; }
    sleep 0.2
  done
}

cmd_start() {
  local d=${1:-}
  [[ -n "$d" ]] || usage
  [[ -x "$KUBE_APISERVER" && -x "$ETCD" ]] || die "binaries not built: run '$0 build' first"
  mkdir -p "$d"
  d=$(cd "$d" && pwd)
  [[ ! -e "$d/pids" ]] || die "$d/pids exists: already running? ('$0 stop $d' first)"
  local start=$SECONDS etcd_port peer_port api_port etcd_pid api_pid extra_args=()
  # Extra kube-apiserver flags (word-split; later flags win), e.g. --feature-gates=...
  read -r -a extra_args <<<"${LEASEHOLD_ENVTEST_APISERVER_ARGS:-}"
  if [[ ${LEASEHOLD_ENVTEST_CLUSTER:-} == 1 ]]; then
    # StatefulSet rolling updates with maxUnavailable (alpha in 1.33): on in the apiserver and
    # the controller-manager alike. Before the caller's flags, which win.
    extra_args=("--feature-gates=$CLUSTER_FEATURE_GATES" "${extra_args[@]}")
  fi
  etcd_port=$(free_port)
  peer_port=$(free_port)
  api_port=$(free_port)

  rm -rf "${d:?}/etcd" # stale data from a crashed run would not match the new peer URL
  gen_certs "$d"
  cat >"$d/tokens.csv" <<EOF
$ADMIN_TOKEN,admin,admin-uid,"system:masters"
$VIEWER_TOKEN,viewer,viewer-uid,"leasehold:viewers"
$NOBODY_TOKEN,nobody,nobody-uid
EOF
  chmod 600 "$d/tokens.csv"

  # setsid: the control plane outlives `start` and is not hit by the terminal's Ctrl-C.
  setsid "$ETCD" \
    --name=envtest \
    --data-dir="$d/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" \
    --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="envtest=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync \
    >"$d/etcd.log" 2>&1 </dev/null &
  etcd_pid=$!
  printf 'etcd %s\n' "$etcd_pid" >"$d/pids"
  if ! wait_http "http://127.0.0.1:$etcd_port/health" 60 "$etcd_pid" etcd; then
    tail -n 30 "$d/etcd.log" >&2 || true
    cmd_stop "$d"
    exit 1
  fi

  setsid "$KUBE_APISERVER" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$api_port" \
    --cert-dir="$d" \
    --tls-cert-file="$d/apiserver.crt" \
    --tls-private-key-file="$d/apiserver.key" \
    --client-ca-file="$d/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$d/sa.pub" \
    --service-account-signing-key-file="$d/sa.key" \
    --service-cluster-ip-range=10.96.0.0/12 \
    --authorization-mode=RBAC \
    --token-auth-file="$d/tokens.csv" \
    --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount \
    --endpoint-reconciler-type=none \
    --profiling=false \
    "${extra_args[@]}" \
    >"$d/kube-apiserver.log" 2>&1 </dev/null &
  api_pid=$!
  printf 'kube-apiserver %s\n' "$api_pid" >>"$d/pids"
  if ! wait_http "https://127.0.0.1:$api_port/readyz" 180 "$api_pid" kube-apiserver \
    --cacert "$d/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN"; then
    tail -n 30 "$d/kube-apiserver.log" >&2 || true
    cmd_stop "$d"
    exit 1
  fi

  write_kubeconfig "$d" "$api_port"
  log "started in $((SECONDS - start))s: kube-apiserver https://127.0.0.1:$api_port" \
    "(pid $api_pid), etcd 127.0.0.1:$etcd_port (pid $etcd_pid), logs in $d"
  if [[ ${LEASEHOLD_ENVTEST_CLUSTER:-} == 1 ]]; then
    start_cluster "$d" || {
      cmd_stop "$d"
      exit 1
    }
  fi
  echo "$d/kubeconfig"
}

# The rest of a cluster: kube-controller-manager and kube-scheduler (the real controllers:
# StatefulSet, ReplicaSet, EndpointSlice, garbage collector, namespace, ServiceAccount and its
# token, node lifecycle, disruption/eviction), and kwok running $KWOK_NODES fake nodes whose
# kubelets make scheduled pods Running and Ready with IPs (one kwok process per node, named
# kwok-node-N in DIR/pids), and six 10 Gi PersistentVolumes. All as the admin user.
start_cluster() {
  local d=$1 start=$SECONDS pid i kwok_port
  [[ -x "$KUBE_CONTROLLER_MANAGER" && -x "$KUBE_SCHEDULER" && -x "$KWOK" ]] ||
    { log "controllers not built: run 'LEASEHOLD_ENVTEST_CLUSTER=1 $0 build' first"; return 1; }
  local kc="$d/kubeconfig" kubectl=(kubectl --kubeconfig "$d/kubeconfig")
  # What both components take: the admin kubeconfig for everything, no serving, no election.
  local common=(--kubeconfig="$kc" --authentication-kubeconfig="$kc"
    --authorization-kubeconfig="$kc" --bind-address=127.0.0.1 --secure-port=0
    --leader-elect=false --profiling=false)
  # A node whose Lease is not renewed for this long is marked Unknown and its pods not ready
  # (the default is 50 s; kwok renews every quarter of --node-lease-duration-seconds).
  setsid "$KUBE_CONTROLLER_MANAGER" "${common[@]}" \
    --service-account-private-key-file="$d/sa.key" \
    --root-ca-file="$d/ca.crt" \
    --cluster-name=envtest \
    --node-monitor-grace-period=12s \
    --feature-gates="$CLUSTER_FEATURE_GATES" \
    >"$d/kube-controller-manager.log" 2>&1 </dev/null &
  pid=$!
  printf 'kube-controller-manager %s\n' "$pid" >>"$d/pids"
  # A pod whose claim the PV controller binds while the scheduler is trying the pod ("pod has
  # unbound immediate PersistentVolumeClaims") now and then misses its requeue and waits in the
  # unschedulable queue for the flag's default, 5 min — past any rollout's timeout (seen here:
  # the MMR example's second copy, 1 run in 12; kubernetes/kubernetes#87145 reports the same).
  # 20 s bounds that wait (the queue is flushed every 30 s).
  setsid "$KUBE_SCHEDULER" "${common[@]}" --pod-max-in-unschedulable-pods-duration=20s \
    >"$d/kube-scheduler.log" 2>&1 </dev/null &
  pid=$!
  printf 'kube-scheduler %s\n' "$pid" >>"$d/pids"

  # kwok's stock stages, except that pods labelled leasehold.test/kubelet=harness are not
  # deleted by kwok once terminating: the test harness stops their member process first and
  # then deletes the pod, as a kubelet does after its containers exit.
  {
    for f in node-initialize node-heartbeat-with-lease pod-ready pod-complete; do
      cat "$KWOK_DIR/stages/$f.yaml"
      echo "---"
    done
    sed '/^    matchExpressions:$/a\
    - key: '"'"'.metadata.labels["leasehold.test/kubelet"]'"'"'\
      operator: '"'"'DoesNotExist'"'"'' "$KWOK_DIR/stages/pod-delete.yaml"
  } >"$d/kwok-stages.yaml"
  grep -qF 'leasehold.test/kubelet' "$d/kwok-stages.yaml" || { log "could not adapt kwok's pod-delete stage"; return 1; }
  # One kwok per node, each with the node's pod CIDR: SIGKILL to kwok-node-N's kwok is that
  # node losing power (its Lease stops; the node lifecycle controller marks it and its pods).
  for ((i = 0; i < KWOK_NODES; i++)); do
    kwok_port=$(free_port)
    setsid "$KWOK" \
      --kubeconfig="$kc" \
      --config="$d/kwok-stages.yaml" \
      --manage-single-node="kwok-node-$i" \
      --node-lease-duration-seconds=8 \
      --server-address="127.0.0.1:$kwok_port" \
      --cidr="10.244.$i.1/24" \
      >"$d/kwok-node-$i.log" 2>&1 </dev/null &
    pid=$!
    printf 'kwok-node-%s %s\n' "$i" "$pid" >>"$d/pids"
  done

  for ((i = 0; i < KWOK_NODES; i++)); do
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {node.alpha.kubernetes.io/ttl: "0"}
  labels: {kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}
EOF
    echo "---"
  done | "${kubectl[@]}" apply -f - >/dev/null || { log "could not create the kwok nodes"; return 1; }
  # Storage, as a static provisioner would leave it: claims without a StorageClass (the
  # overlays' leasehold-data, the MMR example's three) bind to one of these, with room to
  # spare. Nothing mounts them.
  for ((i = 0; i < 6; i++)); do
    cat <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: envtest-pv-$i}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /var/lib/envtest-pv-$i}
EOF
    echo "---"
  done | "${kubectl[@]}" apply -f - >/dev/null || { log "could not create the PersistentVolumes"; return 1; }
  # Ready: the nodes are (kwok) and the default ServiceAccount exists (the ServiceAccount
  # controller runs); every process is still alive.
  local deadline=$((SECONDS + 120)) ready
  while :; do
    ready=$("${kubectl[@]}" get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)
    if ((ready == KWOK_NODES)) && "${kubectl[@]}" -n default get serviceaccount default >/dev/null 2>&1; then
      break
    fi
    for name in kube-controller-manager kube-scheduler $(seq -f 'kwok-node-%g' 0 $((KWOK_NODES - 1))); do
      pid=$(awk -v n="$name" '$1 == n { print $2 }' "$d/pids")
      alive "$pid" || { log "$name exited during startup:"; tail -n 30 "$d/$name.log" >&2; return 1; }
    done
    ((SECONDS < deadline)) || { log "cluster not ready after 120s ($ready of $KWOK_NODES nodes ready)"; return 1; }
    sleep 0.5
  done
  log "cluster started in $((SECONDS - start))s: kube-controller-manager, kube-scheduler," \
    "kwok with $KWOK_NODES nodes"
}

cmd_stop() {
  local d=${1:-} name pid
  [[ -n "$d" ]] || usage
  if [[ -f "$d/pids" ]]; then
    # Its clients first, then the apiserver, so it does not spin on a vanished etcd.
    while read -r name pid; do
      case $name in
        kube-controller-manager) stop_pid "$pid" "$KUBE_CONTROLLER_MANAGER" ;;
        kube-scheduler) stop_pid "$pid" "$KUBE_SCHEDULER" ;;
        kwok-node-*) stop_pid "$pid" "$KWOK" ;;
      esac
    done <"$d/pids"
    while read -r name pid; do
      [[ $name == kube-apiserver ]] && stop_pid "$pid" "$KUBE_APISERVER"
    done <"$d/pids"
    while read -r name pid; do
      [[ $name == etcd ]] && stop_pid "$pid" "$ETCD"
    done <"$d/pids"
  else
    log "no $d/pids: nothing to stop"
  fi
  rm -rf "${d:?}/etcd"
  rm -f "$d"/{pids,kubeconfig,tokens.csv,ca.crt,ca.key,apiserver.crt,apiserver.key,sa.key,sa.pub,kwok-stages.yaml}
  rm -f "$d"/apiserver-loopback-client__.{crt,key}
}

RUN_DIR=""
RUN_CHILD=""
run_cleanup() {
  if [[ -n "$RUN_CHILD" ]] && kill -0 "$RUN_CHILD" 2>/dev/null; then
    kill -TERM "$RUN_CHILD" 2>/dev/null || true
    wait "$RUN_CHILD" 2>/dev/null || true
  fi
  [[ -n "$RUN_DIR" ]] || return 0
  cmd_stop "$RUN_DIR"
  if [[ ${LEASEHOLD_ENVTEST_KEEP:-} == 1 ]]; then
    log "kept $RUN_DIR (logs)"
  else
    rm -rf "$RUN_DIR"
  fi
}

cmd_run() {
  if [[ ${1:-} == -- ]]; then shift; fi
  (($# > 0)) || usage
  cmd_build
  local status=0
  trap run_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-envtest.XXXXXX")
  LEASEHOLD_TEST_KUBECONFIG=$(cmd_start "$RUN_DIR")
  export LEASEHOLD_TEST_KUBECONFIG
  if [[ ${LEASEHOLD_ENVTEST_CLUSTER:-} == 1 ]]; then
    export LEASEHOLD_TEST_CLUSTER=1
  fi
  # In the background + wait, so a SIGTERM to this script is handled at once (and passed on to
  # CMD by run_cleanup) rather than after CMD exits. <&0 keeps CMD's stdin.
  "$@" <&0 &
  RUN_CHILD=$!
  wait "$RUN_CHILD" || status=$?
  RUN_CHILD=""
  return "$status"
}

case ${1:-} in
  build) shift; cmd_build "$@" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  run) shift; cmd_run "$@" ;;
  *) usage ;;
esac
