#!/usr/bin/env bash
# The whole test suite: unit and property tests, HTTP/router tests, and the integration tests
# against the in-process Kubernetes simulator (kube-rs and kubectl over real HTTP).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked "$@"
