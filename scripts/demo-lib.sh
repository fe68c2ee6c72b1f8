# Sourced by scripts that run a throwaway `leasehold demo` (schemathesis.sh, docs-check.sh):
# start one on free ports, wait until it serves, stop it.
#
#   demo_start BIN DIR [DEMO FLAGS...]   starts `BIN demo` in DIR with its state in DIR/state
#                                        (stdout DIR/demo.out, log DIR/demo.log); sets demo_pid
#                                        and base (http://host:port) once /readyz answers 200;
#                                        returns 1 (log shown) if not
#   demo_stop                            SIGINT, then SIGKILL after 20 s; clears demo_pid

demo_pid=
base=

demo_start() {
  local bin=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  # Port 0 for both servers: the demo prints the dashboard's address.
  (cd "$dir" && RUST_LOG=${RUST_LOG:-warn} exec "$bin" demo --state-dir "$dir/state" --listen 127.0.0.1:0 \
    --kube-listen 127.0.0.1:0 "$@" >"$dir/demo.out" 2>"$dir/demo.log") &
  demo_pid=$!
  base=
  for _ in $(seq 1 300); do
    base=$(sed -n 's|^  dashboard: *\(http://[^/]*\)/$|\1|p' "$dir/demo.out" 2>/dev/null || true)
    [ -n "$base" ] && break
    kill -0 "$demo_pid" 2>/dev/null || { echo "the demo did not start:"; cat "$dir/demo.log"; return 1; }
    sleep 0.1
  done
  [ -n "$base" ] || { echo "the demo printed no address"; cat "$dir/demo.log"; return 1; }
  for _ in $(seq 1 120); do
    demo_ready && return 0
    sleep 0.5
  done
  echo "the demo never became ready at $base"; tail -50 "$dir/demo.log"; return 1
}

demo_ready() {
  python3 - "$base" <<'PY'
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1] + "/readyz", timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

demo_stop() {
  if [ -n "$demo_pid" ] && kill -0 "$demo_pid" 2>/dev/null; then
    kill -INT "$demo_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$demo_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$demo_pid" 2>/dev/null || true
  fi
  demo_pid=
}
