#!/usr/bin/env bash
# The whole test suite: unit and property tests, HTTP/router tests, and the integration tests
# against the in-process Kubernetes simulator (kube-rs, kubectl and the engine with real agents
# over real HTTP), run by scripts/cargo-test.sh (both crates of the workspace; the product's
# integration binary area by area). The history store's tests run on SQLite and, when PostgreSQL's server
# binaries are installed (initdb, pg_ctl), also on a throwaway PostgreSQL (scripts/postgres.sh).
# Without arguments it then runs Schemathesis against a running demo (scripts/schemathesis.sh;
# needs python3 with venv, and PyPI), counted as one more test; LEASEHOLD_SKIP_SCHEMATHESIS=1
# leaves it out. Then scripts/docs-check.sh runs the user docs' commands against a demo (each
# block counted as a test; needs curl and jq, installed with apt-get when missing;
# LEASEHOLD_SKIP_DOCS_CHECK=1 leaves it out). The browser tests (tests/it/browser.rs) need chromium and chromedriver, and npm
# for axe-core (scripts/fetch-axe.sh): installed here with apt-get when missing
# (LEASEHOLD_SKIP_BROWSER=1 skips them instead).
# Then scripts/monitoring-check.sh: the alert rules (promtool) and, against a real Prometheus
# (Debian's package, installed when missing) scraping a demo, the alerts firing and resolving
# and every Grafana query answering (each check counted; LEASEHOLD_SKIP_MONITORING=1 leaves it
# out).
# Then scripts/image.sh: the image (umoci, from the release binary, which it builds) inspected
# and compared with the Dockerfile, broken copies refused, and run by podman to /healthz (each
# check counted; LEASEHOLD_SKIP_IMAGE=1 leaves it out).
# Helm is built from the Go module proxy when Go is there (scripts/helm.sh, cached), for the
# chart's tests, and its lint and render counts as one more test (LEASEHOLD_SKIP_HELM=1 leaves
# both out).
# Arguments go to `cargo test` instead of the default run (e.g. `-p leasehold --test it engine::`).
# Ends with one total line, "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
if ! command -v chromedriver >/dev/null 2>&1 && [ "${LEASEHOLD_SKIP_BROWSER:-}" != 1 ]; then
  echo "== installing chromium and chromedriver for the browser tests"
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
      || echo "could not install chromium; the browser tests (tests/it/browser.rs) will fail (LEASEHOLD_SKIP_BROWSER=1 skips them)" >&2
  else
    echo "chromedriver missing and cannot apt-get install it; the browser tests (tests/it/browser.rs) will fail" >&2
  fi
fi
if ! command -v npm >/dev/null 2>&1 && [ "${LEASEHOLD_SKIP_BROWSER:-}" != 1 ] \
   && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "== installing npm for axe-core in the browser tests (scripts/fetch-axe.sh)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null) \
    || echo "could not install npm; the browser tests will fail (LEASEHOLD_SKIP_BROWSER=1 skips them)" >&2
fi
if ! command -v jq >/dev/null 2>&1 && [ "${LEASEHOLD_SKIP_DOCS_CHECK:-}" != 1 ] \
   && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "== installing jq for scripts/docs-check.sh"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq curl >/dev/null) \
    || echo "could not install jq; scripts/docs-check.sh will fail (LEASEHOLD_SKIP_DOCS_CHECK=1 skips it)" >&2
fi
# Helm, for the chart's tests (tests/it/deploy.rs) and its lint and render below: built from the
# Go module proxy and cached (scripts/helm.sh; ~4 CPU-minutes the first time). Without Go the
# chart tests say they skipped (and fail under CI).
if [ "${LEASEHOLD_SKIP_HELM:-}" != 1 ] && command -v go >/dev/null 2>&1; then
  echo "== helm for the chart tests (scripts/helm.sh build)"
  ./scripts/helm.sh build || echo "could not build helm: the chart tests will fail" >&2
fi
# gnmic, for the simulator's test with a real gnmic (crates/kube-sim/tests/gnmic.rs): built
# from ../shared/gnmic's archive and cached (scripts/gnmic.sh); without it that test says it
# skipped (and fails under CI).
if [ "${LEASEHOLD_SKIP_GNMIC:-}" != 1 ] && command -v go >/dev/null 2>&1; then
  echo "== gnmic for the simulator's gnmic test (scripts/gnmic.sh build)"
  ./scripts/gnmic.sh build || echo "could not build gnmic: the gnmic test will skip or fail" >&2
fi
# An OpenTelemetry Collector, for the Target Allocator test (tests/it/scrape_otel.rs): built from
# the Go module proxy with the upstream collector builder and cached (scripts/otelcol.sh; about
# 10 minutes cold, which .ci/run starts in the background at the beginning). Built, the test runs
# and must pass (LEASEHOLD_OTELCOL); not built, it says it skipped.
if [ "${LEASEHOLD_SKIP_OTELCOL:-}" != 1 ] && command -v go >/dev/null 2>&1; then
  echo "== an OpenTelemetry Collector for the Target Allocator test (scripts/otelcol.sh build)"
  if ./scripts/otelcol.sh build; then
    LEASEHOLD_OTELCOL=$(./scripts/otelcol.sh path)
    export LEASEHOLD_OTELCOL
  else
    echo "could not build the OpenTelemetry Collector: its test will say it skipped" >&2
  fi
fi
run=(./scripts/cargo-test.sh "$@")
if [ -z "${LEASEHOLD_TEST_POSTGRES_URL:-}" ]; then
  if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    run=(./scripts/postgres.sh run -- "${run[@]}")
  else
    echo "note: PostgreSQL server binaries not found; store tests run on SQLite only" >&2
  fi
fi
"${run[@]}" 2>&1 | tee "$log" || status=$?
extra_passed=0 extra_failed=0
if [ $# -eq 0 ] && [ "${LEASEHOLD_SKIP_HELM:-}" != 1 ] && command -v go >/dev/null 2>&1; then
  echo "== helm lint and render of deploy/helm/leasehold, every ci/ values file (scripts/helm.sh check)"
  if ./scripts/helm.sh check; then
    extra_passed=$((extra_passed + 1))
  else
    extra_failed=$((extra_failed + 1))
    status=1
  fi
fi
# Runs a checker that ends with "N passed, N failed" and adds its counts (one failure when it
# printed none).
run_counted() {
  local out counts
  out=$(mktemp)
  "$@" 2>&1 | tee "$out" || status=1
  counts=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$out" | tail -1)
  if [ -n "$counts" ]; then
    extra_passed=$((extra_passed + ${counts% *}))
    extra_failed=$((extra_failed + ${counts#* }))
  else
    extra_failed=$((extra_failed + 1))
    status=1
  fi
  rm -f "$out"
}
if [ $# -eq 0 ] && [ "${LEASEHOLD_SKIP_MONITORING:-}" != 1 ]; then
  echo "== monitoring: the alert rules and the Grafana dashboard against a real Prometheus scraping a demo (scripts/monitoring-check.sh)"
  run_counted env LEASEHOLD_BIN=target/debug/leasehold ./scripts/monitoring-check.sh
fi
if [ $# -eq 0 ] && [ "${LEASEHOLD_SKIP_IMAGE:-}" != 1 ]; then
  echo "== image: built with umoci from the release binary, inspected, refused when broken, run by podman (scripts/image.sh)"
  image_start=$SECONDS
  run_counted ./scripts/image.sh
  echo "== image: $((SECONDS - image_start)) s"
fi
if [ $# -eq 0 ] && [ "${LEASEHOLD_SKIP_SCHEMATHESIS:-}" != 1 ]; then
  echo "== schemathesis: the API against its OpenAPI document on a running demo (scripts/schemathesis.sh)"
  if ./scripts/schemathesis.sh; then
    extra_passed=$((extra_passed + 1))
  else
    extra_failed=$((extra_failed + 1))
    status=1
  fi
fi
if [ $# -eq 0 ] && [ "${LEASEHOLD_SKIP_DOCS_CHECK:-}" != 1 ]; then
  echo "== docs-check: the commands of the user docs against a running demo (scripts/docs-check.sh)"
  run_counted ./scripts/docs-check.sh
fi
awk -v ep="$extra_passed" -v ef="$extra_failed" \
  '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
   END { printf "%d passed, %d failed\n", p + ep, f + ef }' "$log"
exit "$status"
