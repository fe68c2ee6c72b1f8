# Shared by the scripts that build Go tools from source (scripts/envtest.sh, scripts/gnmic.sh);
# sourced, not run. The caller defines `die` and sets `src` (the build directory) before `quiet`.

# Go builds share the machine with Rust builds: lowest CPU priority, one package at a time.
gobuild_env() {
  env GOFLAGS="-p=1 -mod=mod -buildvcs=false -trimpath" GOTOOLCHAIN=local GOWORK=off \
    CGO_ENABLED=0 nice -n 19 "$@"
}

# Run a command with its output in $src/go.log; show the tail only if it fails.
quiet() {
  if ! "$@" >"$src/go.log" 2>&1; then
    grep -v '^go: \(downloading\|added\|upgraded\) ' "$src/go.log" | tail -n 40 >&2
    die "failed: $* (full output: $src/go.log)"
  fi
}
