#!/usr/bin/env bash
# Fetches axe-core (the accessibility checker the browser tests run on every dashboard page)
# from the npm registry into target/axe-core/, once: `npm pack` of the pinned version, checked
# against its published integrity hash, unpacked. Prints the path of axe.min.js.
#
#   scripts/fetch-axe.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.14.1
dir=target/axe-core
out="$dir/axe-core-$VERSION.min.js"
if [ ! -s "$out" ]; then
  command -v npm >/dev/null || { echo "fetch-axe.sh: npm is needed (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$dir"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "axe-core@$VERSION" >/dev/null 2>"$tmp/npm.log") \
    || { cat "$tmp/npm.log" >&2; exit 1; }
  want=$(cd "$tmp" && npm view "axe-core@$VERSION" dist.integrity 2>/dev/null)
  got=$(node -e 'const c=require("crypto"),f=require("fs");
    process.stdout.write("sha512-"+c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' \
    "$tmp/axe-core-$VERSION.tgz")
  if [ "$want" != "$got" ]; then
    echo "fetch-axe.sh: axe-core-$VERSION.tgz does not match the registry's integrity ($want)" >&2
    exit 1
  fi
  tar -xzf "$tmp/axe-core-$VERSION.tgz" -C "$tmp" package/axe.min.js
  mv "$tmp/package/axe.min.js" "$out"
fi
echo "$PWD/$out"
