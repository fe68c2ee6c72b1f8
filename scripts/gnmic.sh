#!/usr/bin/env bash
# gnmic for the tests: builds gnmic from the source archive in ../shared/gnmic/ (the Go module
# proxy's copy of v0.47.0 lacks its nested pkg/api and pkg/cache modules; the archive has them,
# and the dependencies come from the proxy), and caches the binary (like envtest.sh does
# kube-apiserver).
#
#   scripts/gnmic.sh build     build (or reuse the cached) gnmic
#   scripts/gnmic.sh path      print the binary's path, building it first if needed
#
# Exit status 2: the archive or Go is missing (the message says which); the tests then fail
# with that message when CI is set and skip with it otherwise. 1: anything else failed.
#
# Environment:
#   LEASEHOLD_GNMIC_CACHE     binary cache (default: $HOME/.cache/leasehold-gnmic); the binary
#                             is <cache>/<version>/gnmic
#   LEASEHOLD_GNMIC_ARCHIVE   the source archive (default: ../shared/gnmic/gnmic-v<version>-src.tar.gz
#                             beside the repository)
set -euo pipefail

VERSION=0.47.0
# sha256 of `git archive --prefix=gnmic-0.47.0/` of openconfig/gnmic tag v0.47.0 (commit
# 747b576e8eab3b88a21d540e2a31c8d2183c1a74), as ../shared/gnmic/README.md gives it.
ARCHIVE_SHA256=ea2196613f495207ef0f6e485221ac2aabcd1af8c002a07185fb57218a60183c

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ARCHIVE="${LEASEHOLD_GNMIC_ARCHIVE:-$ROOT/../shared/gnmic/gnmic-v$VERSION-src.tar.gz}"
CACHE="${LEASEHOLD_GNMIC_CACHE:-$HOME/.cache/leasehold-gnmic}"
DIR="$CACHE/$VERSION"
GNMIC="$DIR/gnmic"

log() { printf 'gnmic.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# What the machine lacks (not a failure of the build): exit 2.
missing() { log "error: $*"; exit 2; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 64
}

# gobuild_env, quiet
. "$(dirname "${BASH_SOURCE[0]}")/go-build-lib.sh"

cmd_build() {
  if [[ -x "$GNMIC" ]]; then
    log "gnmic $VERSION: cached at $GNMIC"
    return
  fi
  [[ -f "$ARCHIVE" ]] || missing "gnmic's source archive is missing: $ARCHIVE (set LEASEHOLD_GNMIC_ARCHIVE)"
  command -v go >/dev/null || missing "go is not installed (needed to build gnmic $VERSION from $ARCHIVE)"
  mkdir -p "$DIR"
  # One build at a time per cache (parallel test runs would otherwise both build).
  exec 9>"$DIR/.build.lock"
  flock 9
  if [[ -x "$GNMIC" ]]; then # built by whoever held the lock
    exec 9>&-
    log "gnmic $VERSION: cached at $GNMIC"
    return
  fi
  local start=$SECONDS src="$DIR/src" sum
  sum=$(sha256sum "$ARCHIVE" | cut -d' ' -f1)
  [[ $sum == "$ARCHIVE_SHA256" ]] ||
    die "$ARCHIVE: sha256 $sum, expected $ARCHIVE_SHA256 (not gnmic v$VERSION's archive?)"
  log "gnmic $VERSION: building from $ARCHIVE (a few minutes the first time)"
  rm -rf "$src"
  mkdir -p "$src"
  tar -xzf "$ARCHIVE" -C "$src"
  src="$src/gnmic-$VERSION"
  [[ -f "$src/go.mod" ]] || die "$ARCHIVE has no gnmic-$VERSION/go.mod"
  (cd "$src" && quiet gobuild_env go build -o "$GNMIC.tmp" \
    -ldflags "-s -w -X github.com/openconfig/gnmic/pkg/version.Version=$VERSION" .)
  mv "$GNMIC.tmp" "$GNMIC"
  rm -rf "$DIR/src" # Go's module and build caches keep what a rebuild needs
  exec 9>&-
  log "gnmic $VERSION: built in $((SECONDS - start))s -> $GNMIC"
}

cmd_path() {
  cmd_build
  echo "$GNMIC"
}

case ${1:-} in
  build) shift; cmd_build "$@" ;;
  path) shift; cmd_path "$@" ;;
  *) usage ;;
esac
