#!/usr/bin/env bash
# Helm for checking deploy/helm/leasehold: built from source through the Go module proxy
# (helm.sh/helm/v4, no binary download), cached, and used to lint and render the chart.
#
#   scripts/helm.sh build     build (or reuse the cached) helm; prints nothing but progress
#   scripts/helm.sh path      print the binary's path (fails, building nothing, when it is
#                             not built: tests/it/deploy.rs asks this)
#   scripts/helm.sh check     build if needed, then for the chart's every ci/*-values.yaml:
#                             `helm lint --strict`, `helm template`, and check that the render
#                             parses as YAML objects each with apiVersion, kind and a name
#   scripts/helm.sh -- ARGS   build if needed, then run helm ARGS
#
# Environment:
#   LEASEHOLD_HELM_CACHE   binary cache (default: $HOME/.cache/leasehold-helm)
#
# The build uses a Go module and build cache of its own under the cache directory and deletes
# both once the binary is in place (the cache then holds only bin/helm, 64 MB; the build needs
# ~1.1 GB while it runs). Cold: 7.5 minutes on 2 cores shared with two cargo builds (3.5 CPU
# minutes); cached: instant. `check` itself takes about 2 s.
set -euo pipefail

# A released Helm 4 whose go.mod the machine's Go (1.26) builds and the module proxy serves.
HELM_VERSION=v4.3.2

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHART="$ROOT/deploy/helm/leasehold"
CACHE="${LEASEHOLD_HELM_CACHE:-$HOME/.cache/leasehold-helm}"
HELM_DIR="$CACHE/helm-$HELM_VERSION"
HELM="$HELM_DIR/bin/helm"

log() { printf 'helm.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# As scripts/envtest.sh builds: lowest CPU priority, one package at a time, the machine's Go
# only (no toolchain download), no cgo.
gobuild_env() {
  env GOFLAGS="-p=1 -buildvcs=false -trimpath" GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 \
    GOMODCACHE="$HELM_DIR/gomod" GOCACHE="$HELM_DIR/gocache" GOPATH="$HELM_DIR/gopath" \
    nice -n 19 "$@"
}

cmd_build() {
  if [[ -x "$HELM" ]]; then
    log "helm $HELM_VERSION: cached at $HELM"
    return
  fi
  command -v go >/dev/null || die "go is not installed"
  mkdir -p "$CACHE"
  # One build at a time per cache (parallel test runs would otherwise both build).
  exec 9>"$CACHE/.build.lock"
  flock 9
  if [[ -x "$HELM" ]]; then
    exec 9>&-
    log "helm $HELM_VERSION: cached at $HELM (built meanwhile)"
    return
  fi
  local start=$SECONDS work
  mkdir -p "$HELM_DIR/bin"
  log "helm $HELM_VERSION: building from helm.sh/helm/v4@$HELM_VERSION (a few minutes)"
  # `go install pkg@version` builds with Helm's own go.mod and go.sum (no replace directives in
  # it), outside any module of ours. The version stamp is what Helm's Makefile sets for a tag.
  work=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-helm.XXXXXX")
  if ! (cd "$work" && GOBIN="$HELM_DIR/bin.tmp" gobuild_env go install \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >"$work/go.log" 2>&1); then
    grep -v '^go: \(downloading\|added\|upgraded\) ' "$work/go.log" | tail -n 40 >&2
    rm -rf "$work"
    die "go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION failed"
  fi
  rm -rf "$work"
  mv "$HELM_DIR/bin.tmp/helm" "$HELM"
  rmdir "$HELM_DIR/bin.tmp"
  # The module cache is read-only by design: let Go remove it.
  gobuild_env go clean -modcache
  rm -rf "$HELM_DIR/gomod" "$HELM_DIR/gocache" "$HELM_DIR/gopath"
  exec 9>&-
  log "helm $HELM_VERSION: built in $((SECONDS - start))s -> $HELM"
  "$HELM" version --short >&2
}

cmd_path() {
  [[ -x "$HELM" ]] || die "helm $HELM_VERSION is not built: run '$0 build'"
  echo "$HELM"
}

# Helm with its state kept away from the user's (no repositories, no plugins, no registry login).
helm_isolated() {
  local home
  home=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-helm-home.XXXXXX")
  local status=0
  HELM_CACHE_HOME="$home/cache" HELM_CONFIG_HOME="$home/config" HELM_DATA_HOME="$home/data" \
    "$HELM" "$@" || status=$?
  rm -rf "$home"
  return "$status"
}

# Every document of a render is a YAML mapping with apiVersion, kind and metadata.name; prints
# the count. Parsed with PyYAML when python3 has it; without it, a textual check (helm template
# itself already refuses a template whose output is not YAML).
check_render() {
  local file=$1
  python3 - "$file" <<'EOF'
import sys
try:
    import yaml
except ImportError:
    yaml = None
text = open(sys.argv[1]).read()
if yaml is None:
    # No PyYAML: at least every document names its apiVersion, kind and name.
    docs = [d for d in text.split("\n---") if d.strip() and not all(
        l.startswith("#") or not l.strip() for l in d.splitlines())]
    for d in docs:
        for key in ("apiVersion:", "kind:", "  name:"):
            if key not in d:
                sys.exit(f"a document has no {key!r}:\n{d}")
    print(len(docs))
    sys.exit(0)
docs = [d for d in yaml.safe_load_all(text) if d is not None]
for d in docs:
    if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") \
            or not (d.get("metadata") or {}).get("name"):
        sys.exit(f"not a Kubernetes object: {d!r}")
print(len(docs))
EOF
}

cmd_check() {
  cmd_build
  local values n out failed=0
  shopt -s nullglob
  local files=("$CHART"/ci/*-values.yaml)
  ((${#files[@]} > 0)) || die "no values files in $CHART/ci"
  out=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-helm-check.XXXXXX")
  for values in "${files[@]}"; do
    local name
    name=$(basename "$values" .yaml)
    if ! helm_isolated lint --strict "$CHART" -f "$values" >"$out/$name.lint" 2>&1; then
      cat "$out/$name.lint" >&2
      log "FAIL: helm lint --strict with ci/$name.yaml"
      failed=1
      continue
    fi
    if ! helm_isolated template leasehold "$CHART" --namespace leasehold -f "$values" \
      >"$out/$name.yaml" 2>"$out/$name.err"; then
      cat "$out/$name.err" >&2
      log "FAIL: helm template with ci/$name.yaml"
      failed=1
      continue
    fi
    if ! n=$(check_render "$out/$name.yaml"); then
      log "FAIL: the render of ci/$name.yaml does not parse as Kubernetes objects"
      failed=1
      continue
    fi
    log "ok: ci/$name.yaml: lint clean, $n objects"
  done
  rm -rf "$out"
  ((failed == 0)) || die "chart check failed"
  log "chart check passed (${#files[@]} values files)"
}

case ${1:-} in
  build) shift; cmd_build ;;
  path) shift; cmd_path ;;
  check) shift; cmd_check ;;
  --) shift; cmd_build; "$HELM" "$@" ;;
  *) usage ;;
esac
