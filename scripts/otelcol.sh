#!/usr/bin/env bash
# An OpenTelemetry Collector for the tests (tests/it/scrape_otel.rs): the upstream collector
# builder (ocb, go.opentelemetry.io/collector/cmd/builder) generates a distribution with the
# contrib `prometheus` receiver (whose `target_allocator` reads `leasehold agent
# --scrape-sd-listen`) and the `debug` and `nop` exporters, all from the Go module proxy; the
# binary is cached (like gnmic.sh and envtest.sh do theirs).
#
#   scripts/otelcol.sh build     build (or reuse the cached) collector
#   scripts/otelcol.sh path      print the binary's path; builds nothing (exit 3 when it is not
#                                built: the build takes too long to start from inside a test)
#
# Exit status 2: Go is missing; 3 (path): not built yet; 1: anything else failed.
#
# Cold (empty Go build cache), on a 2-core machine shared with cargo builds: 549 s, ocb included,
# plus ~50 s to download the modules (2.1 GB) when the module cache is empty too; without
# `remove_all_sd` (below) the compile alone took 855 s. The receiver brings Prometheus' scrape
# and discovery code and client-go. The binary is 81 MB; Go's caches keep ~4 GB after it.
#
# Environment:
#   LEASEHOLD_OTELCOL_CACHE   binary cache (default: $HOME/.cache/leasehold-otelcol); the binary
#                             is <cache>/<version>/otelcol
#
# The test takes `LEASEHOLD_OTELCOL` as the binary when it names a file, else asks `path`;
# without a binary it says it skipped, or fails when `CI` and `LEASEHOLD_OTELCOL` are both set.
set -euo pipefail

# One collector release: core v0.165.0 (stable modules v1.71.0) with contrib v0.165.1, the
# newest the module proxy served whole for the prometheus receiver.
VERSION=0.165.0
CORE_STABLE=v1.71.0
CONTRIB=v0.165.1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="${LEASEHOLD_OTELCOL_CACHE:-$HOME/.cache/leasehold-otelcol}"
DIR="$CACHE/$VERSION"
OTELCOL="$DIR/otelcol"
# The work directory (ocb, the generated sources, go.log); deleted after a build.
WORK="$ROOT/target/otelcol-build/$VERSION"

log() { printf 'otelcol.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# What the machine lacks (not a failure of the build): exit 2.
missing() { log "error: $*"; exit 2; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 64
}

# gobuild_env, quiet
. "$(dirname "${BASH_SOURCE[0]}")/go-build-lib.sh"

# The distribution: what ocb generates and builds. Prometheus' own service discoveries other
# than file and HTTP are left out at build time (`remove_all_sd`, below): the receiver's target
# allocator uses HTTP SD, and every component is the unchanged upstream one.
manifest() {
  cat <<EOF
dist:
  module: leasehold.test/otelcol
  name: otelcol
  description: OpenTelemetry Collector for Leasehold's tests (prometheus receiver; debug, nop exporters)
  version: $VERSION
  output_path: $WORK/src
receivers:
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver $CONTRIB
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/debugexporter v$VERSION
  - gomod: go.opentelemetry.io/collector/exporter/nopexporter v$VERSION
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider $CORE_STABLE
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider $CORE_STABLE
EOF
}

cmd_build() {
  if [[ -x "$OTELCOL" ]]; then
    log "otelcol $VERSION: cached at $OTELCOL"
    return
  fi
  command -v go >/dev/null || missing "go is not installed (needed to build otelcol $VERSION)"
  mkdir -p "$DIR"
  # One build at a time per cache (parallel test runs would otherwise both build).
  exec 9>"$DIR/.build.lock"
  flock 9
  if [[ -x "$OTELCOL" ]]; then # built by whoever held the lock
    exec 9>&-
    log "otelcol $VERSION: cached at $OTELCOL"
    return
  fi
  local start=$SECONDS src="$WORK"
  log "otelcol $VERSION: building with ocb from the Go module proxy (about 10 minutes the first time)"
  rm -rf "$WORK"
  mkdir -p "$WORK"
  manifest >"$WORK/manifest.yaml"
  # ocb itself, at the collector's release.
  (cd "$WORK" && GOBIN="$WORK/bin" quiet gobuild_env go install \
    "go.opentelemetry.io/collector/cmd/builder@v$VERSION")
  # The sources and their go.mod (ocb runs `go mod tidy`); the build is ours, with the flags
  # every Go tool here is built with.
  (cd "$WORK" && quiet gobuild_env bin/builder --config manifest.yaml --skip-compilation)
  (cd "$WORK/src" && quiet gobuild_env go build -tags remove_all_sd -ldflags "-s -w" \
    -o "$OTELCOL.tmp" .)
  "$OTELCOL.tmp" --version >/dev/null || die "the built otelcol does not run"
  mv "$OTELCOL.tmp" "$OTELCOL"
  rm -rf "$WORK" # Go's module and build caches keep what a rebuild needs
  exec 9>&-
  log "otelcol $VERSION: built in $((SECONDS - start))s -> $OTELCOL"
}

cmd_path() {
  if [[ ! -x "$OTELCOL" ]]; then
    log "otelcol $VERSION is not built: scripts/otelcol.sh build (about 10 minutes the first time)"
    exit 3
  fi
  echo "$OTELCOL"
}

case ${1:-} in
  build) shift; cmd_build "$@" ;;
  path) shift; cmd_path "$@" ;;
  *) usage ;;
esac
