#!/usr/bin/env bash
# Checks the monitoring files of deploy/monitoring/ (deploy/monitoring/README.md):
#
# (a) static: `promtool check rules` on the alert rules, `promtool test rules` on each file of
#     deploy/monitoring/tests/, every alert having a test where it fires and one where it does
#     not, its annotations and severity and a section in docs/runbook.md, and the Grafana
#     dashboard's shape (schemaVersion, the `datasource` and `cluster` variables, every query on
#     `${datasource}`);
# (b) for real: a `leasehold demo` (60 collector targets) scraped every second by a real
#     Prometheus (Debian's package) that evaluates a test copy of the rules every second. The
#     test copy is generated from leasehold-alerts.yaml, never kept: every duration in it (`for:`,
#     range selectors, offsets) divided by MONITORING_TIME_SCALE (20), range selectors and
#     offsets kept at 30 s at least (the control loop makes a pass every 10 s at least, a window
#     must hold several), and the handoff-gap threshold (seconds) divided by the same factor
#     (30 → 1.5 s: the demo's failovers take about its 10 s lease duration). Then:
#       - the metric families and label names the rules and the dashboard use are the ones the
#         demo's /metrics has (a family with no sample yet: the ones docs/api.md lists);
#       - at the start no alert fires;
#       - crash: the demo's control crashes collector-1 (its agent dies holding its targets, its
#         pod fails); LeaseholdMembersNotReady and LeaseholdHandoffGapHigh go pending then
#         firing, LeaseholdMemberFailedOver fires (it has no `for:`); the failed pod is deleted
#         and a member added; every alert resolves;
#       - stall: a member the demo does not run, a `leasehold agent` process (pod collector-9
#         created with kubectl), takes its share, is stopped with SIGSTOP past its lease
#         duration (its pod stays ready: a hung process), is fenced and failed over
#         (LeaseholdMemberFailedOver, LeaseholdHandoffGapHigh), resumes with SIGCONT and reports
#         that it was paused past its hold (LeaseholdMemberPausedPastHold); stopped and its pod
#         deleted, every alert resolves;
#       - mass lapse: the three members of `replicas` crash at once; LeaseholdMassLapse,
#         LeaseholdTargetsWithoutOwner and LeaseholdMembersNotReady go pending then firing; the
#         failed pods are deleted and a member added, which takes the targets one lapsed member
#         per lease duration (LeaseholdMemberFailedOver and LeaseholdHandoffGapHigh may fire
#         then, and LeaseholdOperationStuck for the rebalance its join starts, which waits for
#         the held-back members); every alert resolves;
#       - no other alert fired meanwhile;
#       - every query of the dashboard (panels and variables, variables substituted as Grafana
#         does with "All" selected) returns data over the run.
# Every check is counted; the last line is "N passed, N failed"; exits non-zero on a failure.
# Everything started is stopped and the temporary directory removed on exit.
#
#   scripts/monitoring-check.sh [--static]     (--static: part (a) only, 2 s; in full 3.5 min)
#
#   LEASEHOLD_BIN           the binary (default target/debug/leasehold; not built here)
#   MONITORING_DIR          the files to check (default deploy/monitoring; to try broken copies)
#   MONITORING_TIME_SCALE   divisor of the rules' durations in the test copy (default 20)
#   PROMETHEUS, PROMTOOL    the binaries (default: from PATH; Debian's `prometheus` package is
#                           installed with apt-get when missing and this runs as root)
#   MONITORING_VERBOSE=1    prints the alerts seen at every change
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

static_only=
case "${1:-}" in
  --static) static_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--static]" >&2; exit 2 ;;
esac

mon=$(cd "${MONITORING_DIR:-deploy/monitoring}" && pwd)
rules=$mon/leasehold-alerts.yaml
dashboard=$mon/grafana-dashboard.json
scale=${MONITORING_TIME_SCALE:-20}
bin=${LEASEHOLD_BIN:-target/debug/leasehold}

# The tools: Debian's prometheus package has both prometheus and promtool.
if ! command -v "${PROMTOOL:-promtool}" >/dev/null || { [ -z "$static_only" ] && ! command -v "${PROMETHEUS:-prometheus}" >/dev/null; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's prometheus package (prometheus, promtool)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "monitoring-check: promtool and prometheus are needed (Debian: apt-get install prometheus)" >&2
    exit 1
  fi
fi
promtool=$(command -v "${PROMTOOL:-promtool}")
for tool in python3 curl; do
  command -v "$tool" >/dev/null || { echo "monitoring-check: $tool is required" >&2; exit 1; }
done
if ! python3 -c 'import yaml' 2>/dev/null; then
  echo "monitoring-check: installing PyYAML for python3 (pip)" >&2
  python3 -m pip install --quiet pyyaml >/dev/null 2>&1 || true
fi
python3 -c 'import yaml' 2>/dev/null || { echo "monitoring-check: python3's yaml module is required (pip install pyyaml)" >&2; exit 1; }

work=$(mktemp -d)
prom_pid= agent_pid= py_pid=
demo_pid=
cleanup() {
  set +e
  if [ -n "$py_pid" ]; then kill -TERM "$py_pid" 2>/dev/null; wait "$py_pid" 2>/dev/null; fi
  if [ -n "$agent_pid" ]; then kill -CONT "$agent_pid" 2>/dev/null; kill -KILL "$agent_pid" 2>/dev/null; wait "$agent_pid" 2>/dev/null; fi
  if [ -n "$prom_pid" ]; then
    kill -TERM "$prom_pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$prom_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$prom_pid" 2>/dev/null; wait "$prom_pid" 2>/dev/null
  fi
  [ -n "$demo_pid" ] && demo_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok     $*"; }
fail() { failed=$((failed + 1)); echo "FAILED $*"; }
# check NAME COMMAND...: runs COMMAND; its output is shown only if it fails.
check() {
  local name=$1
  shift
  if "$@" >"$work/out" 2>&1; then pass "$name"; else fail "$name"; sed 's/^/    /' "$work/out" | tail -40; fi
}
# Results printed by the Python helper as "ok <what>" / "FAILED <what>" lines.
tally() {
  local line
  while IFS= read -r line; do
    case "$line" in
      "ok "*) pass "${line#ok }" ;;
      "FAILED "*) fail "${line#FAILED }" ;;
      *) echo "    $line" ;;
    esac
  done
}

# The helper: Prometheus' HTTP API, the rules' and dashboard's contents.
cat >"$work/mon.py" <<'PY'
import json, math, re, sys, time, urllib.parse, urllib.request
import yaml

def dur(s):
    secs = 0
    for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", s):
        secs += int(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}[u]
    return secs

def alerts_of(path):
    return [r for g in yaml.safe_load(open(path))["groups"] for r in g["rules"] if "alert" in r]

def scaled(src, dst, scale):
    """The test copy: durations divided by `scale` (range selectors and offsets at least 30 s),
    and the handoff-gap threshold too."""
    text = open(src).read()
    fmt = lambda s: "%ds" % max(1, round(s))
    text = re.sub(r"(\bfor:\s*)(\d+[smhdwy][0-9smhdwy]*)", lambda m: m.group(1) + fmt(dur(m.group(2)) / scale), text)
    text = re.sub(r"\[(\d+[smhdwy][0-9smhdwy]*)\]", lambda m: "[" + fmt(max(30, dur(m.group(1)) / scale)) + "]", text)
    text = re.sub(r"(\boffset\s+)(\d+[smhdwy][0-9smhdwy]*)", lambda m: m.group(1) + fmt(max(30, dur(m.group(2)) / scale)), text)
    text, n = re.subn(r"(histogram_quantile\(0\.99,[^>]*?leasehold_handoff_gap_seconds_bucket[^>]*?\)\s*>\s*)(\d+(?:\.\d+)?)",
                      lambda m: m.group(1) + "%g" % (float(m.group(2)) / scale), text)
    if n != 1:
        sys.exit("the handoff-gap rule's threshold was not found (the test copy scales it)")
    open(dst, "w").write(text)

def coverage(rules, tests):
    """Every alert has a test case where it fires and one where it does not."""
    fires, quiet = set(), set()
    for t in tests:
        for case in yaml.safe_load(open(t)).get("tests", []):
            for a in case.get("alert_rule_test", []):
                (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
    for r in alerts_of(rules):
        name = r["alert"]
        for what, seen in (("a firing", fires), ("a not-firing", quiet)):
            print(("ok" if name in seen else "FAILED") + f" unit tests: {name} has {what} case")
        ann = r.get("annotations", {})
        sev = r.get("labels", {}).get("severity")
        good = all(ann.get(k) for k in ("summary", "description")) and \
            re.fullmatch(r"docs/runbook\.md#" + name.lower(), ann.get("runbook_url", "")) and \
            sev in ("critical", "warning", "info")
        print(("ok" if good else "FAILED") + f" rules: {name} has summary, description, runbook_url and severity")
    for name in sorted((fires | quiet) - {r["alert"] for r in alerts_of(rules)}):
        print(f"FAILED unit tests: {name} is tested but is no alert")

def runbook(rules, doc):
    text = open(doc).read()
    for r in alerts_of(rules):
        name = r["alert"]
        ok = re.search(r"^### " + name + r"\s*$", text, re.M)
        print(("ok" if ok else "FAILED") + f" docs/runbook.md has a section {name} (#{name.lower()})")

def dashboard_queries(path):
    """(where, expr) of every panel target and query variable."""
    d = json.load(open(path))
    out = []
    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((f"panel {p.get('title')!r} {t.get('refId')}", t["expr"]))
            walk(p.get("panels", []))
    walk(d["panels"])
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append((f"variable {v['name']}", q))
    return d, out

def dashboard_shape(path):
    d, queries = dashboard_queries(path)
    vars_ = {v["name"]: v for v in d["templating"]["list"]}
    checks = [
        ("schemaVersion is 36-41", 36 <= d.get("schemaVersion", 0) <= 41),
        ("has a Prometheus datasource variable", vars_.get("datasource", {}).get("type") == "datasource" and vars_["datasource"].get("query") == "prometheus"),
        ("has a cluster query variable", vars_.get("cluster", {}).get("type") == "query"),
        ("every panel and variable uses ${datasource}", all(
            (p.get("datasource") or {}).get("uid") == "${datasource}" and all((t.get("datasource") or {}).get("uid") == "${datasource}" for t in p.get("targets", []))
            for p in d["panels"] if p["type"] != "row") and all(v["datasource"]["uid"] == "${datasource}" for v in d["templating"]["list"] if v["type"] == "query")),
        ("every panel with a cluster label filters on $cluster", all(
            '$cluster' in t["expr"] for p in d["panels"] for t in p.get("targets", []) if re.search(r"\bcluster\b", t["expr"]))),
        ("panel ids are unique", len({p["id"] for p in d["panels"]}) == len(d["panels"])),
        (f"has queries ({len(queries)})", len(queries) > 10),
    ]
    for what, ok in checks:
        print(("ok" if ok else "FAILED") + " dashboard: " + what)

# --- against Prometheus ---------------------------------------------------------------------

PROM = None

def api(path, **params):
    url = PROM + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body}")
    return body["data"]

def active():
    """{(alertname, cluster): state} of Leasehold's alerts now."""
    return {(a["labels"]["alertname"], a["labels"].get("cluster", "")): a["state"]
            for a in api("/api/v1/alerts")["alerts"] if a["labels"]["alertname"].startswith("Leasehold")}

def watch(expect, pending, allowed, timeout, seen_log):
    """Polls the alerts until every `expect` alert fires (those in `pending` seen pending
    first) or `timeout`; records every alert seen active in `seen_log`. Returns per alert the
    states it went through, in order."""
    states = {}
    last = None
    deadline = time.time() + timeout
    while True:
        now = active()
        for key, st in now.items():
            seq = states.setdefault(key, [])
            if not seq or seq[-1] != st:
                seq.append(st)
        if now != last:
            seen_log.update(now.keys())
            if VERBOSE:
                print(f"{time.strftime('%H:%M:%S')} alerts: {dict(sorted(now.items()))}")
            last = now
        if all("firing" in states.get(k, []) for k in expect) or time.time() > deadline:
            return states
        time.sleep(0.25)

def wait_until(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if cond():
                return True
        except Exception:
            pass
        time.sleep(0.5)
    print(f"    timed out waiting for {what}")
    return False

def query(expr):
    return api("/api/v1/query", query=expr)["result"]

VERBOSE = False

def main():
    global PROM, VERBOSE
    cmd = sys.argv[1]
    if cmd == "scale":
        return scaled(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    if cmd == "coverage":
        return coverage(sys.argv[2], sys.argv[3:])
    if cmd == "runbook":
        return runbook(sys.argv[2], sys.argv[3])
    if cmd == "dashboard-shape":
        return dashboard_shape(sys.argv[2])
    PROM = sys.argv[2]
    import os
    VERBOSE = os.environ.get("MONITORING_VERBOSE") == "1"
    if cmd == "wait-scraped":
        ok = wait_until(lambda: query('sum(leasehold_targets{cluster="collector",state="owned"})')[0]["value"][1] == sys.argv[3], 60,
                        "Prometheus to see every target owned")
        print(("ok" if ok else "FAILED") + f" Prometheus scrapes the demo (all {sys.argv[3]} targets owned)")
    elif cmd == "quiet":
        # quiet SECONDS: nothing fires for that long (the rules' windows and offsets filled).
        seen = set()
        states = watch([("never", "")], [], [], float(sys.argv[3]), seen)
        firing = sorted(k for k, seq in states.items() if "firing" in seq)
        print(("ok" if not firing else "FAILED") + f" no alert fires in the first {sys.argv[3]} s (active: {sorted(seen) or 'none'}; firing: {firing or 'none'})")
    elif cmd == "expect":
        # expect SCENARIO CLUSTER TIMEOUT EXPECT(a,b) PENDING(a,b) ALLOWED(a,b) SEENFILE
        scenario, cluster, timeout = sys.argv[3], sys.argv[4], float(sys.argv[5])
        expect = [(a, cluster) for a in sys.argv[6].split(",") if a]
        pend = [(a, cluster) for a in sys.argv[7].split(",") if a]
        seen = set()
        states = watch(expect, pend, [], timeout, seen)
        for k in expect:
            seq = states.get(k, [])
            ok = "firing" in seq and (k not in pend or ("pending" in seq and seq.index("pending") < seq.index("firing")))
            want = "pending, then firing" if k in pend else "firing"
            print(("ok" if ok else "FAILED") + f" {scenario}: {k[0]}{{cluster={cluster}}} {want} (seen: {' → '.join(seq) or 'nothing'})")
        with open(sys.argv[9], "a") as f:
            for k in seen:
                f.write(f"{scenario} {k[0]} {k[1] or '-'} {'firing' if 'firing' in states.get(k, []) else 'pending'}\n")
    elif cmd == "resolved":
        # resolved SCENARIO TIMEOUT SEENFILE ALLOWED(a,b): after recovery every alert of the
        # scenario resolves, and every other one too; on the way, others may go pending, and
        # fire only if ALLOWED (the recovery's own effects, such as the failovers it lets
        # happen).
        scenario, timeout, seenfile = sys.argv[3], float(sys.argv[4]), sys.argv[5]
        allowed = set(a for a in sys.argv[6].split(",") if a) if len(sys.argv) > 6 else set()
        keys = set()
        for l in open(seenfile):
            f = l.split()
            if f and f[0] == scenario:
                keys.add((f[1], "" if f[2] == "-" else f[2]))
        states = {}
        deadline = time.time() + timeout
        last = None
        while True:
            now = active()
            for k, st in now.items():
                seq = states.setdefault(k, [])
                if not seq or seq[-1] != st:
                    seq.append(st)
            if VERBOSE and now != last:
                print(f"{time.strftime('%H:%M:%S')} alerts: {dict(sorted(now.items()))}")
            last = now
            if not now or time.time() > deadline:
                break
            time.sleep(0.5)
        for k in sorted(keys):
            print(("ok" if k not in now else "FAILED") + f" {scenario}: {k[0]}{{cluster={k[1]}}} resolves after recovery")
        for k in sorted(set(states) - keys):
            fired = "firing" in states[k]
            ok = (not fired or k[0] in allowed) and k not in now
            print(("ok" if ok else "FAILED") + f" {scenario} recovery: {k[0]}{{cluster={k[1]}}} "
                  + ("fired (expected: the recovery's own effect)" if fired and k[0] in allowed else "fired" if fired else "went pending only")
                  + (", and resolved" if k not in now else ", and is still active"))
        with open(seenfile, "a") as f:
            for k in set(states) - keys:
                f.write(f"{scenario}-recovery {k[0]} {k[1] or '-'} {'firing' if 'firing' in states[k] else 'pending'}\n")
    elif cmd == "unexpected":
        # unexpected SEENFILE ALLOWED(a,b): no alert but these fired (pending ones are listed:
        # with the durations divided, a window can be shorter than what it waits for).
        allowed = set(sys.argv[4].split(","))
        lines = [l.split() for l in open(sys.argv[3]) if l.strip()]
        fired = {f[1] for f in lines if f[3] == "firing"}
        pending = {f[1] for f in lines} - fired
        extra = sorted(fired - allowed)
        print(("ok" if not extra else "FAILED") + f" no other alert fired (fired: {sorted(fired)}; not expected: {extra or 'none'}; only pending: {sorted(pending) or 'none'})")
    elif cmd == "dashboard":
        # dashboard FILE JOB START: every query, variables substituted, returns data since START.
        d, queries = dashboard_queries(sys.argv[3])
        job, start = sys.argv[4], float(sys.argv[5])
        end = time.time()
        rng = "%ds" % max(60, int(end - start))
        clusters = api("/api/v1/label/cluster/values", **{"match[]": "leasehold_targets"})
        subst = {"$job": job, "$cluster": "(" + "|".join(clusters) + ")" if clusters else ".*",
                 "$__rate_interval": "30s", "$__interval": "2s", "$__range": rng}
        for where, expr in queries:
            q = expr
            for k in sorted(subst, key=len, reverse=True):
                q = q.replace("${" + k[1:] + "}", subst[k]).replace(k, subst[k])
            if "$" in q:
                print(f"FAILED dashboard {where}: a variable is left: {q}")
                continue
            m = re.fullmatch(r"label_values\((?:(.*),\s*)?(\w+)\)", q.strip())
            try:
                if m:
                    vals = api(f"/api/v1/label/{m.group(2)}/values", **({"match[]": m.group(1)} if m.group(1) else {}))
                    ok, got = bool(vals), f"{len(vals)} values"
                else:
                    res = api("/api/v1/query_range", query=q, start=start, end=end, step=2)["result"]
                    finite = sum(1 for s in res for _, v in s["values"] if not math.isnan(float(v)))
                    ok, got = finite > 0, f"{len(res)} series, {finite} values"
            except Exception as e:
                ok, got = False, str(e)
            print(("ok" if ok else "FAILED") + f" dashboard {where} returns data ({got})")
            if not ok:
                print(f"    query: {q}")
    elif cmd == "names":
        # names METRICS_FILE RULES DASHBOARD DOC: the families and labels used exist. A family
        # with no sample yet (a counter is created at its first increment) is not in the
        # exposition: it must then be in the metrics table of DOC (docs/api.md).
        text = open(sys.argv[3]).read()
        documented = set(re.findall(r"^\| `(leasehold_\w+)`", open(sys.argv[6]).read(), re.M))
        documented |= set(re.findall(r"^\| `leasehold_\w+`, `(leasehold_\w+)`", open(sys.argv[6]).read(), re.M))
        families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
        labels = {"job", "instance", "le", "__name__"}
        for lbls in re.findall(r"^leasehold_\w+\{([^}]*)\}", text, re.M):
            labels |= set(re.findall(r"(\w+)=\"", lbls))
        base = lambda n: re.sub(r"_(total|bucket|count|sum|created)$", "", n)
        exprs = [("rules", r["expr"]) for r in alerts_of(sys.argv[4])]
        exprs += [("dashboard", e) for _, e in dashboard_queries(sys.argv[5])[1]]
        used, used_labels = {}, {}
        for where, e in exprs:
            e = re.sub(r'"[^"]*"', '""', e)
            for n in re.findall(r"\bleasehold_\w+", e):
                used.setdefault(base(n), set()).add(where)
            for n in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", e):
                used_labels.setdefault(n, set()).add(where)
            for group in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e):
                for n in re.findall(r"\w+", group):
                    used_labels.setdefault(n, set()).add(where)
            m = re.search(r"label_values\((?:.*,\s*)?(\w+)\)", e)
            if m:
                used_labels.setdefault(m.group(1), set()).add(where)
        fam = {base(f) for f in families}
        docs = {base(n) for n in documented}
        for n in sorted(used):
            where = ", ".join(sorted(used[n]))
            if n in fam:
                print(f"ok metric {n} (used by {where}) is in the demo's /metrics")
            elif n in docs:
                print(f"ok metric {n} (used by {where}) has no sample in this run; docs/api.md lists it")
            else:
                print(f"FAILED metric {n} (used by {where}) is neither in the demo's /metrics nor in docs/api.md")
        for n in sorted(used_labels):
            print(("ok" if n in labels else "FAILED") + f" label {n} (used by {', '.join(sorted(used_labels[n]))}) is on the demo's metrics")
    else:
        sys.exit(f"unknown command {cmd}")

main()
PY
mon_py() { python3 "$work/mon.py" "$@"; }
# py CMD ARGS...: runs a helper command and counts the results it prints (its failing counts too).
# In the background, waited for: a signal interrupts `wait` (the trap then stops it too).
py() {
  local rc=0
  MONITORING_VERBOSE=${MONITORING_VERBOSE:-} python3 "$work/mon.py" "$@" >"$work/py.out" 2>&1 &
  py_pid=$!
  wait "$py_pid" || rc=$?
  py_pid=
  tally <"$work/py.out"
  [ "$rc" = 0 ] || fail "helper '$1' exited with $rc"
}

echo "== static checks ($mon)"
check "promtool check rules leasehold-alerts.yaml" "$promtool" check rules "$rules"
tests=("$mon"/tests/*.yaml)
for t in "${tests[@]}"; do
  check "promtool test rules tests/$(basename "$t")" "$promtool" test rules "$t"
done
py coverage "$rules" "${tests[@]}"
py runbook "$rules" docs/runbook.md
check "the dashboard is JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$dashboard"
py dashboard-shape "$dashboard"
check "generate the test copy of the rules (durations / $scale)" mon_py scale "$rules" "$work/rules.yaml" "$scale"
check "promtool check rules on the test copy (durations / $scale)" "$promtool" check rules "$work/rules.yaml"

if [ -n "$static_only" ]; then
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
  exit
fi

echo "== against a real Prometheus scraping leasehold demo"
case "$bin" in /*) ;; *) bin=$root/$bin ;; esac
[ -x "$bin" ] || { echo "monitoring-check: no binary at $bin (build it, or set LEASEHOLD_BIN)"; exit 1; }
command -v kubectl >/dev/null || { echo "monitoring-check: kubectl is required" >&2; exit 1; }
prometheus=$(command -v "${PROMETHEUS:-prometheus}")
# shellcheck source=scripts/demo-lib.sh
. scripts/demo-lib.sh
started=$(date +%s)
if ! demo_start "$bin" "$work/demo" --targets 60; then
  fail "leasehold demo starts"
  echo "$passed passed, $failed failed"
  exit 1
fi
pass "leasehold demo starts ($base)"
export KUBECONFIG=$work/demo/state/kubeconfig

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
prom=http://127.0.0.1:$port
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ["$work/rules.yaml"]
scrape_configs:
  - job_name: leasehold
    static_configs:
      - targets: ["${base#http://}"]
EOF
"$prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$port" --log.level=warn >"$work/prometheus.log" 2>&1 &
prom_pid=$!
ready() { curl -sf "$prom/-/ready" >/dev/null; }
for _ in $(seq 1 60); do ready && break; kill -0 "$prom_pid" 2>/dev/null || break; sleep 0.5; done
if ready; then pass "Prometheus $("$prometheus" --version 2>&1 | head -1 | awk '{print $3}') starts"; else
  fail "Prometheus starts"; tail -20 "$work/prometheus.log"; echo "$passed passed, $failed failed"; exit 1
fi
check "Prometheus loaded the test copy of the rules" \
  bash -c "curl -sf '$prom/api/v1/rules' | python3 -c 'import json,sys; d=json.load(sys.stdin); n=sum(len(g[\"rules\"]) for g in d[\"data\"][\"groups\"]); print(n, \"rules\"); sys.exit(n == 0)'"
py wait-scraped "$prom" 60
py quiet "$prom" 35
seen=$work/seen
: >"$seen"

api() { curl -sS -X POST "$base$1"; echo; }
# The demo proposes the rebalance a join brings (on_join: propose): approve the one waiting, if any.
approve() {
  local id
  id=$(curl -sf "$base/api/v1/operations?cluster=$1&state=proposed" \
    | python3 -c 'import json,sys; i=json.load(sys.stdin)["items"]; print(i[0]["id"] if i else "")') || return 0
  if [ -n "$id" ]; then curl -sf -o /dev/null -X POST "$base/api/v1/operations/$id/approve" || true; fi
}
echo "-- crash: collector-1 dies holding its targets"
api /demo/clusters/collector/members/collector-1/crash
py expect "$prom" crash collector 120 \
  LeaseholdMembersNotReady,LeaseholdMemberFailedOver,LeaseholdHandoffGapHigh \
  LeaseholdMembersNotReady,LeaseholdHandoffGapHigh "" "$seen"
echo "-- crash: recovery (the failed pod deleted, a member added)"
api /demo/clusters/collector/members/collector-1/stop
api /demo/clusters/collector/members
py resolved "$prom" crash 180 "$seen"

echo "-- stall: collector-9, a leasehold agent process, stopped with SIGSTOP"
kubectl -n demo apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: collector-9
  labels: {app: collector, statefulset.kubernetes.io/pod-name: collector-9, apps.kubernetes.io/pod-index: "9"}
spec:
  hostname: collector-9
  subdomain: collector
  nodeName: sim-node-1
  containers: [{name: collector, image: example/collector:1.0}]
EOF
RUST_LOG=warn "$bin" agent --cluster collector --namespace demo --identity collector-9 \
  --lease-duration 10 --hook-timeout 3 --drain-timeout 2 >"$work/agent.log" 2>&1 &
agent_pid=$!
held() { curl -sf "$base/api/v1/clusters/collector/targets?owner=collector-9&limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])'; }
n=0
for _ in $(seq 1 120); do approve collector; n=$(held 2>/dev/null || echo 0); [ "$n" -gt 0 ] && break; sleep 0.5; done
if [ "$n" -gt 0 ]; then pass "stall: collector-9 joined and holds targets ($n)"; else fail "stall: collector-9 joined and holds targets"; tail -20 "$work/agent.log"; fi
# Its share settled (the rebalance's moves done) before it stalls.
sleep 3
kill -STOP "$agent_pid" || fail "stall: the agent is running"
# (LeaseholdHandoffGapHigh's pending state is required in the crash scenario; here it may already
# be active, from the hand-overs of the rebalance collector-9's join brought.)
py expect "$prom" stall collector 120 \
  LeaseholdMemberFailedOver,LeaseholdHandoffGapHigh "" "" "$seen"
n=$(held 2>/dev/null || echo '?')
if [ "$n" = 0 ]; then pass "stall: collector-9's targets failed over while it was stopped"; else fail "stall: collector-9 still holds $n targets"; fi
kill -CONT "$agent_pid" || true
py expect "$prom" stall collector 60 LeaseholdMemberPausedPastHold "" "" "$seen"
echo "-- stall: recovery (the agent stopped, its pod deleted)"
kill -TERM "$agent_pid" 2>/dev/null || true
for _ in $(seq 1 60); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.5; done
kill -KILL "$agent_pid" 2>/dev/null || true
wait "$agent_pid" 2>/dev/null || true
agent_pid=
kubectl -n demo delete pod collector-9 --grace-period=0 --wait=false >/dev/null 2>&1 || true
py resolved "$prom" stall 180 "$seen"

echo "-- mass lapse: every member of replicas crashes at once"
for m in 0 1 2; do api "/demo/clusters/replicas/members/replicas-$m/crash"; done
py expect "$prom" mass-lapse replicas 120 \
  LeaseholdMassLapse,LeaseholdTargetsWithoutOwner,LeaseholdMembersNotReady \
  LeaseholdMassLapse,LeaseholdTargetsWithoutOwner,LeaseholdMembersNotReady "" "$seen"
echo "-- mass lapse: recovery (the failed pods deleted, a member added: it takes the targets one lapsed member per lease duration)"
for m in 0 1 2; do api "/demo/clusters/replicas/members/replicas-$m/stop"; done
api /demo/clusters/replicas/members
# The rebalance the new member's join starts waits for the held-back members' targets: with the
# durations divided but the demo's lease duration not, LeaseholdOperationStuck may fire too.
py resolved "$prom" mass-lapse 180 "$seen" LeaseholdMemberFailedOver,LeaseholdHandoffGapHigh,LeaseholdOperationStuck

py unexpected "$prom" "$seen" \
  LeaseholdMembersNotReady,LeaseholdMemberFailedOver,LeaseholdHandoffGapHigh,LeaseholdMemberPausedPastHold,LeaseholdTargetsWithoutOwner,LeaseholdMassLapse,LeaseholdOperationStuck

echo "== the dashboard's queries against that Prometheus"
curl -sf "$base/metrics" >"$work/metrics.txt"
py names "$prom" "$work/metrics.txt" "$rules" "$dashboard" docs/api.md
py dashboard "$prom" "$dashboard" leasehold "$started"

echo "took $(($(date +%s) - started)) s against the demo"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
