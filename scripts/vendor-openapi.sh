#!/usr/bin/env bash
# Vendors a trimmed copy of the real Kubernetes OpenAPI v3 documents into crates/kube-sim/src/openapi/.
#
# Usage: scripts/vendor-openapi.sh [VERSION]      (default v1.33.5; or set VERSION=...)
#
# Fetches k8s.io/kubernetes@$VERSION through the Go module proxy (`go mod download`), then,
# for each served group-version below, keeps only the paths of the served resources (their
# namespaced, cluster-wide and watch forms, plus the listed subresources and the
# group-version discovery path), only the component schemas reachable from those paths
# (following $ref transitively), drops operation descriptions (keeping schema ones for
# `kubectl explain`), keeps every `x-kubernetes-*`
# extension and every `parameters` list, and writes compact JSON with sorted keys.
set -euo pipefail

VERSION="${1:-${VERSION:-v1.33.5}}"

# The served set: "<group-version path as in /openapi/v3> <resource>[/<subresource>] ...".
# A resource listed without subresources keeps none; add "pods/log" etc. to keep more.
SERVED=(
  "api/v1 namespaces pods pods/status services services/status endpoints configmaps secrets events serviceaccounts persistentvolumeclaims persistentvolumeclaims/status"
  "apis/apps/v1 deployments deployments/status statefulsets statefulsets/status"
  "apis/coordination.k8s.io/v1 leases"
  "apis/discovery.k8s.io/v1 endpointslices"
  "apis/events.k8s.io/v1 events"
  "apis/flowcontrol.apiserver.k8s.io/v1 flowschemas flowschemas/status prioritylevelconfigurations prioritylevelconfigurations/status"
  "apis/authentication.k8s.io/v1 tokenreviews"
  "apis/authorization.k8s.io/v1 subjectaccessreviews selfsubjectaccessreviews localsubjectaccessreviews"
  "apis/networking.k8s.io/v1 networkpolicies"
  "apis/policy/v1 poddisruptionbudgets poddisruptionbudgets/status"
  "apis/rbac.authorization.k8s.io/v1 roles rolebindings clusterroles clusterrolebindings"
)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/crates/kube-sim/src/openapi"

command -v go >/dev/null || { echo "vendor-openapi: go is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "vendor-openapi: python3 is required" >&2; exit 1; }

# `go mod download` needs a module context only for its cache; run it from a scratch dir.
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
DIR="$(cd "$SCRATCH" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$VERSION" \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])')"
SPEC="$DIR/api/openapi-spec/v3"
[ -d "$SPEC" ] || { echo "vendor-openapi: $SPEC not found" >&2; exit 1; }

mkdir -p "$OUT"
SERVED_LIST="$(printf '%s\n' "${SERVED[@]}")" python3 - "$SPEC" "$OUT" <<'PY'
import json, os, sys

spec_dir, out_dir = sys.argv[1], sys.argv[2]
REF_PREFIX = "#/components/schemas/"


def served_path(path, prefix, kept):
    """True when `path` (e.g. /api/v1/namespaces/{namespace}/pods/{name}/status) belongs to
    a served resource: kept = {resource: set(subresources)}."""
    if path == prefix + "/":
        return True  # group-version discovery (APIResourceList)
    if not path.startswith(prefix + "/"):
        return False
    rest = path[len(prefix) + 1:]
    if rest.startswith("watch/"):
        rest = rest[len("watch/"):]
    if rest.startswith("namespaces/{namespace}/"):
        rest = rest[len("namespaces/{namespace}/"):]
    parts = rest.split("/")
    resource = parts[0]
    if resource not in kept:
        return False
    if len(parts) <= 2:
        return len(parts) == 1 or parts[1] == "{name}"
    return len(parts) == 3 and parts[1] == "{name}" and parts[2] in kept[resource]


def strip(node, in_properties=False):
    """Drops `description` keys (but not properties named "description")."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "description" and not in_properties:
                continue
            if k.startswith("x-kubernetes-") or k in ("default", "example", "enum"):
                out[k] = v  # data, not schema: keep verbatim
            else:
                out[k] = strip(v, in_properties=(k == "properties" and not in_properties))
        return out
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node, found):
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str) and r.startswith(REF_PREFIX):
            found.add(r[len(REF_PREFIX):])
        for k, v in node.items():
            if not k.startswith("x-kubernetes-"):
                refs(v, found)
    elif isinstance(node, list):
        for v in node:
            refs(v, found)


for line in os.environ["SERVED_LIST"].splitlines():
    fields = line.split()
    if not fields:
        continue
    gv, entries = fields[0], fields[1:]
    kept = {}
    for e in entries:
        res, _, sub = e.partition("/")
        kept.setdefault(res, set())
        if sub:
            kept[res].add(sub)
    src = os.path.join(spec_dir, gv.replace("/", "__") + "_openapi.json")
    with open(src, encoding="utf-8") as f:
        doc = json.load(f)
    prefix = "/" + gv
    paths = {p: v for p, v in doc["paths"].items() if served_path(p, prefix, kept)}
    missing = [r for r in kept if not any(
        p.rstrip("/").split("/")[-1] == r or ("/" + r + "/") in p for p in paths)]
    if missing:
        sys.exit(f"vendor-openapi: {gv}: no paths for {missing}")
    schemas = doc.get("components", {}).get("schemas", {})
    reachable, todo = set(), set()
    refs(paths, todo)
    while todo:
        name = todo.pop()
        if name in reachable:
            continue
        if name not in schemas:
            sys.exit(f"vendor-openapi: {gv}: dangling $ref {name}")
        reachable.add(name)
        found = set()
        refs(schemas[name], found)
        todo |= found - reachable
    components = {"schemas": {n: schemas[n] for n in sorted(reachable)}}
    if "securitySchemes" in doc.get("components", {}):
        components["securitySchemes"] = doc["components"]["securitySchemes"]
    out = {k: v for k, v in doc.items() if k not in ("paths", "components")}
    # Operation descriptions are dropped (verbose, unused); schema descriptions are kept for
    # `kubectl explain`.
    out["paths"] = strip(paths)
    out["components"] = components
    text = json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    dst = os.path.join(out_dir, gv.replace("/", "__") + ".json")
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{os.path.basename(dst):45} {len(text):>9} bytes  (from {os.path.getsize(src):>9})"
          f"  {len(paths):>3} paths  {len(reachable):>3} schemas")
PY
