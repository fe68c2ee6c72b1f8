#!/usr/bin/env bash
# The Leasehold image, built and checked without a container engine daemon or a registry.
#
# The image is one layer on nothing (no base image): the release binary at /leasehold and only
# what it needs at run time, taken from this machine's Debian packages and checked against
# their recorded md5sums — the dynamic loader and the libraries `ldd` names (glibc's libc,
# libm, and libgcc_s), the CA bundle Debian's ca-certificates generates (rustls-native-certs
# reads it for HTTPS hook URLs and PostgreSQL TLS), those packages' copyright files, an
# /etc/passwd and /etc/group naming user 65532 `nonroot`, and /tmp (1777; the demo's state
# directory; the Deployment mounts an emptyDir there). No shell, no package manager. The binary
# is stripped of its debug line tables (213 → ~50 MB; panics still name functions). Config:
# user 65532:65532, entrypoint /leasehold, cmd `serve --config /etc/leasehold/leasehold.yaml`,
# port 8080, the OCI labels source, version (Cargo.toml's) and licenses (Apache-2.0).
# umoci (Debian's package) writes it as an OCI image layout; no daemon, no registry.
#
# The Dockerfile's build stage runs `scripts/image.sh rootfs` for its files and its final stage
# (FROM scratch) declares the same user, entrypoint, labels, env and port: `check` compares it.
#
#   scripts/image.sh [all]      build, check, self-test, run (each check counted; the last line
#                               is "N passed, N failed"; exits non-zero on a failure)
#   scripts/image.sh build      cargo build --release --locked, then the image:
#                               target/image/oci (layout, tag = the version) and
#                               target/image/leasehold-VERSION.oci.tar (an oci-archive)
#   scripts/image.sh check [LAYOUT:TAG]   inspect an image (default: the one built) and print
#                               its user, entrypoint, files and size; checks each against the
#                               recipe, and the Dockerfile against the image's config
#   scripts/image.sh self-test  breaks copies of the built image and of the Dockerfile, one
#                               way each (a shell added, user root, a library missing, another
#                               entrypoint, a label missing, too big…), and checks that the
#                               check about it refuses each
#   scripts/image.sh run        podman (Debian's package, storage under target/image/podman,
#                               removed after) runs the image read-only as in the Deployment,
#                               with `demo --listen 127.0.0.1:PORT`, and GETs /healthz
#   scripts/image.sh rootfs DIR [BINARY]   only assemble the root filesystem in DIR (what the
#                               Dockerfile's build stage runs; needs bash, coreutils, dpkg, ldd,
#                               objcopy)
#
# Environment:
#   LEASEHOLD_IMAGE_BIN   the binary (default: target/release/leasehold, built here)
#   DOCKERFILE            the Dockerfile compared with the image (default: ./Dockerfile)
#   IMAGE_MAX_MB          the largest compressed image accepted (default 80)
#   LEASEHOLD_SKIP_IMAGE_RUN=1   leaves out `run`
# umoci, podman and python3 are installed with apt-get when missing and this runs as root.
# Warm (the release binary built): 30-50 s on the 2-core development VM (22 CPU-s); cold it
# first builds the release binary (cargo build --release: 11m41s there, other builds running).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# --- the recipe: what the image is (the Dockerfile's final stage must say the same) ----------
BIN_PATH=/leasehold
USER_SPEC=65532:65532
ENTRYPOINT=("$BIN_PATH")
CMD=(serve --config /etc/leasehold/leasehold.yaml)
# The allocator (mimalloc) returns freed pages at once and commits memory as it is used
# (deploy/base/deployment.yaml says why).
ENV=(MIMALLOC_PURGE_DELAY=0 MIMALLOC_EAGER_COMMIT=0 MIMALLOC_ARENA_EAGER_COMMIT=0)
PORT=8080/tcp
SOURCE_URL=https://github.com/leasehold/leasehold
version=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
LICENSES=$(sed -n '/^\[workspace.package\]/,/^\[/s/^license = "\(.*\)"$/\1/p' Cargo.toml | head -1)
LABELS=(
  "org.opencontainers.image.source=$SOURCE_URL"
  "org.opencontainers.image.version=$version"
  "org.opencontainers.image.licenses=$LICENSES"
  "org.opencontainers.image.title=leasehold"
)
# Debian packages whose copyright files go into the image (those the files come from).
DOC_PACKAGES=(libc6 libgcc-s1 ca-certificates)

out=$root/target/image
layout=$out/oci
dockerfile=${DOCKERFILE:-$root/Dockerfile}

log() { printf 'image.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# rootfs DIR BINARY: the image's files in DIR (emptied first). Every library is the file of a
# Debian package, checked against the package's md5sums.
cmd_rootfs() {
  local dir=$1 bin=${2:-target/release/leasehold} lib pkg md5 real
  [ -x "$bin" ] || die "no binary at $bin"
  rm -rf "$dir"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  install -m 0755 "$bin" "$dir$BIN_PATH"
  objcopy --strip-debug "$dir$BIN_PATH"
  # The loader and every library ldd resolves, at the path it resolves them to.
  for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
    pkg=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1-2) || true
    [ -n "$pkg" ] || die "$lib belongs to no Debian package"
    md5=$(md5sum <"$lib" | cut -d' ' -f1)
    grep -q "^$md5 " "/var/lib/dpkg/info/$pkg.md5sums" 2>/dev/null \
      || grep -q "^$md5 " "/var/lib/dpkg/info/${pkg%%:*}.md5sums" 2>/dev/null \
      || die "$lib differs from the file of package $pkg"
    install -D -m 0755 "$lib" "$dir$lib"
  done
  real=/etc/ssl/certs/ca-certificates.crt
  dpkg -s ca-certificates >/dev/null 2>&1 && [ -s "$real" ] \
    || die "Debian's ca-certificates is not installed (no $real)"
  install -D -m 0644 "$real" "$dir$real"
  for pkg in "${DOC_PACKAGES[@]}"; do
    install -D -m 0644 "/usr/share/doc/$pkg/copyright" "$dir/usr/share/doc/$pkg/copyright"
  done
  mkdir -p "$dir/etc"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/etc/group"
  chmod 0644 "$dir/etc/passwd" "$dir/etc/group"
  install -d -m 1777 "$dir/tmp"
  find "$dir" -type d ! -path "$dir/tmp" -exec chmod 0755 {} +
}

tools() {
  local missing=() t
  for t in "$@"; do command -v "$t" >/dev/null || missing+=("$t"); done
  [ ${#missing[@]} = 0 ] && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${missing[*]} (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    die "needs ${missing[*]} (Debian: apt-get install ${missing[*]})"
  fi
}

cmd_build() {
  tools umoci
  local bin=${LEASEHOLD_IMAGE_BIN:-}
  if [ -z "$bin" ]; then
    log "cargo build --release --locked --bin leasehold"
    cargo build --release --locked --bin leasehold >&2
    bin=${CARGO_TARGET_DIR:-target}/release/leasehold
  fi
  local epoch created
  epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
  created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
  mkdir -p "$out"
  cmd_rootfs "$out/rootfs" "$bin"
  # One reproducible layer: sorted, root-owned, every time the last commit's.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$out/rootfs" -cf "$out/layer.tar" .
  rm -rf "$layout"
  umoci init --layout "$layout"
  umoci new --image "$layout:$version"
  umoci raw add-layer --image "$layout:$version" --history.created "$created" \
    --history.created_by "scripts/image.sh rootfs" "$out/layer.tar"
  local args=(--config.user "$USER_SPEC" --config.exposedports "$PORT" --config.workingdir /
              --created "$created" --history.created "$created" --history.created_by "scripts/image.sh config")
  local e
  for e in "${ENTRYPOINT[@]}"; do args+=(--config.entrypoint "$e"); done
  for e in "${CMD[@]}"; do args+=(--config.cmd "$e"); done
  for e in "${ENV[@]}"; do args+=(--config.env "$e"); done
  for e in "${LABELS[@]}"; do args+=(--config.label "$e"); done
  umoci config --image "$layout:$version" "${args[@]}"
  umoci gc --layout "$layout"
  rm -f "$out/layer.tar"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$layout" -cf "$out/leasehold-$version.oci.tar" .
  log "built $layout:$version and $out/leasehold-$version.oci.tar"
}

# The checks, in Python: reads the layout, prints "ok …"/"FAILED …" lines and what it found.
checker() {
  python3 - "$@" <<'PY'
import gzip, io, json, os, re, shlex, subprocess, sys, tarfile

layout, tag, dockerfile, want_json = sys.argv[1:5]
want = json.loads(want_json)
ok = lambda name: print(f"ok {name}")
def check(name, cond, detail=""):
    print(f"ok {name}" if cond else f"FAILED {name}{': ' + detail if detail else ''}")

def blob(d):
    alg, h = d.split(":")
    return os.path.join(layout, "blobs", alg, h)
index = json.load(open(os.path.join(layout, "index.json")))
ref = [m for m in index["manifests"]
       if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
if not ref:
    print(f"FAILED the layout has the tag {tag}"); sys.exit(0)
manifest = json.load(open(blob(ref[0]["digest"])))
config = json.load(open(blob(manifest["config"]["digest"])))
cfg = config.get("config", {})

# The file system the layers give, whiteouts applied: path -> (type, mode, uid, gid, size).
fs = {}
for layer in manifest["layers"]:
    with tarfile.open(blob(layer["digest"]), "r:*") as t:
        for m in t.getmembers():
            p = os.path.normpath("/" + m.name.lstrip("/"))  # "./a", "a", "/a" -> "/a"; "." -> "/"
            base = os.path.basename(p)
            if base == ".wh..wh..opq":
                d = os.path.dirname(p)
                for k in [k for k in fs if k.startswith(d + "/")]: del fs[k]
                continue
            if base.startswith(".wh."):
                gone = os.path.join(os.path.dirname(p), base[4:])
                for k in [k for k in fs if k == gone or k.startswith(gone + "/")]: del fs[k]
                continue
            kind = "dir" if m.isdir() else "file" if m.isfile() else "link" if m.issym() or m.islnk() else "other"
            fs[p] = (kind, m.mode, m.uid, m.gid, m.size)
            if p == want["entrypoint"][0] and m.isfile():  # kept for ldd below (the last layer's)
                with open(os.path.join(want["work"], "leasehold.bin"), "wb") as f:
                    f.write(t.extractfile(m).read())
fs.pop("/", None)

compressed = sum(l["size"] for l in manifest["layers"])
uncompressed = sum(v[4] for v in fs.values() if v[0] == "file")
print(f"image {layout}:{tag} digest {ref[0]['digest']}")
print(f"  user        {cfg.get('User')}")
print(f"  entrypoint  {json.dumps(cfg.get('Entrypoint'))}  cmd {json.dumps(cfg.get('Cmd'))}")
print(f"  env         {json.dumps(cfg.get('Env'))}  ports {json.dumps(sorted(cfg.get('ExposedPorts', {})))}")
print(f"  labels      {json.dumps(cfg.get('Labels'), sort_keys=True)}")
print(f"  size        {compressed / 2**20:.1f} MiB compressed ({len(manifest['layers'])} layer(s)), {uncompressed / 2**20:.1f} MiB of files")
print("  files:")
for p in sorted(fs):
    k, mode, uid, gid, size = fs[p]
    print(f"    {k:4} {mode:04o} {uid}:{gid} {size:>10} {p}")

check("os/architecture linux/amd64", (config.get("os"), config.get("architecture")) == ("linux", "amd64"),
      f"{config.get('os')}/{config.get('architecture')}")
check(f"user is {want['user']}", cfg.get("User") == want["user"], repr(cfg.get("User")))
check(f"entrypoint is {want['entrypoint']}", cfg.get("Entrypoint") == want["entrypoint"], repr(cfg.get("Entrypoint")))
check(f"cmd is {want['cmd']}", cfg.get("Cmd") == want["cmd"], repr(cfg.get("Cmd")))
check(f"env is {want['env']}", sorted(cfg.get("Env") or []) == sorted(want["env"]), repr(cfg.get("Env")))
check(f"exposes {want['port']}", sorted(cfg.get("ExposedPorts", {})) == [want["port"]], repr(cfg.get("ExposedPorts")))
labels = cfg.get("Labels") or {}
for k, v in want["labels"].items():
    check(f"label {k}={v}", labels.get(k) == v, repr(labels.get(k)))

# The files: exactly the recipe's, the libraries being those the binary needs.
needed = set()
binpath = want["entrypoint"][0]
if binpath in fs and fs[binpath][0] == "file":
    tmp = os.path.join(want["work"], "leasehold.bin")
    out = subprocess.run(["ldd", tmp], capture_output=True, text=True).stdout
    for line in out.splitlines():
        w = line.split()
        if len(w) >= 3 and w[1] == "=>" and w[2].startswith("/"): needed.add(w[2])
        elif w and w[0].startswith("/"): needed.add(w[0])
    os.unlink(tmp)
expected_files = {binpath, "/etc/passwd", "/etc/group", "/etc/ssl/certs/ca-certificates.crt"} | needed \
    | {f"/usr/share/doc/{p}/copyright" for p in want["doc_packages"]}
expected = set(expected_files) | {"/tmp"}
for f in list(expected):
    d = os.path.dirname(f)
    while d != "/": expected.add(d); d = os.path.dirname(d)
files = set(fs)
check(f"the files are exactly the recipe's ({len(expected_files)} files: the binary, the loader and libraries it needs ({len(needed)}), CA bundle, passwd, group, copyrights)",
      files == expected,
      f"unexpected {sorted(files - expected)}, missing {sorted(expected - files)}")
shells = sorted(p for p in fs if os.path.basename(p) in ("sh", "bash", "dash", "ash", "zsh", "busybox", "toybox"))
check("no shell (sh, bash, dash, busybox…) anywhere", not shells, repr(shells))
check("no /bin, /sbin, /usr/bin, /usr/sbin", not any(p in fs for p in ("/bin", "/sbin", "/usr/bin", "/usr/sbin")))
check(f"{binpath} is a root-owned 0755 regular file", fs.get(binpath, (None,))[0] == "file"
      and fs[binpath][1] & 0o7777 == 0o755 and fs[binpath][2:4] == (0, 0), repr(fs.get(binpath)))
writable = sorted(p for p, (k, mode, uid, gid, _) in fs.items()
                  if p != "/tmp" and (uid != 0 or gid != 0 or mode & 0o022))
check("everything but /tmp is root's and not writable by others", not writable, repr(writable))
check("/tmp is 1777", fs.get("/tmp", (None, 0))[0] == "dir" and fs["/tmp"][1] & 0o7777 == 0o1777, repr(fs.get("/tmp")))
check(f"compressed size {compressed / 2**20:.1f} MiB is at most {want['max_mb']} MiB", compressed <= want["max_mb"] * 2**20)

# The Dockerfile's final stage says the same as the image's config.
lines, cur = [], ""
for raw in open(dockerfile):
    s = raw.rstrip("\n")
    if not cur and (s.lstrip().startswith("#") or not s.strip()): continue
    if s.endswith("\\"): cur += s[:-1] + " "; continue
    lines.append((cur + s).strip()); cur = ""
stages = [i for i, l in enumerate(lines) if l.split()[0].upper() == "FROM"]
final = lines[stages[-1]:] if stages else []
def instr(name): return [l.split(None, 1)[1] if len(l.split(None, 1)) > 1 else "" for l in final if l.split()[0].upper() == name]
def kv(args):
    out = {}
    for tok in shlex.split(args):
        k, _, v = tok.partition("="); out[k] = v
    return out
df_from = final[0].split()[1] if final else None
df_user = (instr("USER") or [None])[-1]
df_entry = json.loads((instr("ENTRYPOINT") or ["null"])[-1])
df_cmd = json.loads((instr("CMD") or ["null"])[-1])
df_env, df_labels = {}, {}
for a in instr("ENV"): df_env.update(kv(a))
for a in instr("LABEL"): df_labels.update(kv(a))
df_ports = sorted(p if "/" in p else p + "/tcp" for a in instr("EXPOSE") for p in a.split())
df_copy = instr("COPY")
check("Dockerfile: final stage FROM scratch", df_from == "scratch", repr(df_from))
check("Dockerfile: COPY of the rootfs `scripts/image.sh rootfs` assembled, only",
      df_copy == ["--from=build /out/rootfs/ /"] and not instr("RUN") and not instr("ADD")
      and any("scripts/image.sh rootfs /out/rootfs" in l for l in lines[:stages[-1]]), repr(df_copy))
check("Dockerfile: USER as the image's", df_user == cfg.get("User"), f"{df_user!r} vs {cfg.get('User')!r}")
check("Dockerfile: ENTRYPOINT as the image's", df_entry == cfg.get("Entrypoint"), f"{df_entry!r} vs {cfg.get('Entrypoint')!r}")
check("Dockerfile: CMD as the image's", df_cmd == cfg.get("Cmd"), f"{df_cmd!r} vs {cfg.get('Cmd')!r}")
img_env = dict(e.split("=", 1) for e in cfg.get("Env") or [])
img_env.pop("PATH", None)  # docker build adds its default PATH to an image from scratch
check("Dockerfile: ENV as the image's", df_env == img_env, f"{df_env!r} vs {img_env!r}")
check("Dockerfile: LABELs as the image's", df_labels == labels, f"{df_labels!r} vs {labels!r}")
check("Dockerfile: EXPOSE as the image's", df_ports == sorted(cfg.get("ExposedPorts", {})), f"{df_ports!r}")
check("Dockerfile: no WORKDIR, SHELL, VOLUME, HEALTHCHECK beyond the recipe",
      not any(instr(n) for n in ("SHELL", "VOLUME", "HEALTHCHECK", "ONBUILD")) and instr("WORKDIR") in ([], ["/"]))
PY
}

passed=0 failed=0
count() { # reads "ok …"/"FAILED …" lines, shows everything, counts them
  local line
  while IFS= read -r line; do
    case "$line" in
      "ok "*) passed=$((passed + 1)); echo "ok     ${line#ok }" ;;
      "FAILED "*) failed=$((failed + 1)); echo "FAILED ${line#FAILED }" ;;
      *) echo "$line" ;;
    esac
  done
}
pass() { passed=$((passed + 1)); echo "ok     $*"; }
fail() { failed=$((failed + 1)); echo "FAILED $*"; }

want_json() {
  python3 - "$USER_SPEC" "$PORT" "${IMAGE_MAX_MB:-80}" "$1" "${ENTRYPOINT[*]}" "${CMD[*]}" "${ENV[*]}" \
    "${DOC_PACKAGES[*]}" "${LABELS[@]}" <<'PY'
import json, sys
user, port, max_mb, work, entry, cmd, env, docs, *labels = sys.argv[1:]
print(json.dumps({"user": user, "port": port, "max_mb": int(max_mb), "work": work,
                  "entrypoint": entry.split(), "cmd": cmd.split(), "env": env.split(),
                  "doc_packages": docs.split(), "labels": dict(l.split("=", 1) for l in labels)}))
PY
}

# check_image LAYOUT TAG [DOCKERFILE [static]]: the static checks, then (unless `static`) the
# binary run in a chroot of the unpacked image as user 65532 (the loader and libraries in it
# suffice).
check_image() {
  local lay=$1 tag=$2 df=${3:-$dockerfile} work
  work=$(mktemp -d "$out/check.XXXXXX")
  count < <(checker "$lay" "$tag" "$df" "$(want_json "$work")")
  if [ "${4:-}" = static ]; then
    :
  elif umoci unpack --image "$lay:$tag" "$work/bundle" >"$work/unpack.log" 2>&1; then
    local v
    if v=$(chroot --userspec="$USER_SPEC" "$work/bundle/rootfs" "$BIN_PATH" --version 2>&1); then
      pass "runs as $USER_SPEC in the unpacked image alone (chroot): $v"
    else
      fail "runs as $USER_SPEC in the unpacked image alone (chroot): $v"
    fi
  else
    fail "umoci unpacks it"; cat "$work/unpack.log"
  fi
  rm -rf "$work"
}

cmd_check() {
  tools umoci python3
  local spec=${1:-$layout:$version}
  check_image "${spec%:*}" "${spec##*:}"
}

# self-test: each check shown to fail when its subject is broken: a copy of the image (or of
# the Dockerfile) broken in one way must make that check, named by the first words of its
# line, say FAILED.
cmd_self_test() {
  tools umoci python3
  [ -f "$layout/index.json" ] || die "no image at $layout: run scripts/image.sh build first"
  local st=$out/self-test lay
  rm -rf "$st"; mkdir -p "$st"
  lay=$st/oci
  cp -al "$layout" "$lay"  # blobs are content-addressed and never rewritten: sharing them is safe
  # layer TAG DIR [TAR OPTIONS...]: a tag with one more layer holding DIR's contents.
  layer() {
    local tag=$1 dir=$2; shift 2
    tar -C "$dir" --owner=0 --group=0 --numeric-owner "$@" -cf "$st/$tag.tar" .
    umoci raw add-layer --image "$lay:$version" --tag "$tag" "$st/$tag.tar" >/dev/null
    rm -f "$st/$tag.tar"
  }
  mkdir -p "$st/shell/bin" "$st/nolib/lib/x86_64-linux-gnu" "$st/usrbin/usr/bin" "$st/writable/etc" "$st/tmp/tmp" "$st/binmode"
  cp "$(command -v dash || command -v sh)" "$st/shell/bin/sh"
  layer shell "$st/shell"
  : >"$st/nolib/lib/x86_64-linux-gnu/.wh.libgcc_s.so.1"
  layer nolib "$st/nolib"
  printf 'not a shell\n' >"$st/usrbin/usr/bin/env"
  layer usrbin "$st/usrbin"
  install -m 0666 "$out/rootfs/etc/passwd" "$st/writable/etc/passwd"
  layer writable "$st/writable"
  chmod 0755 "$st/tmp/tmp"
  layer tmp "$st/tmp"
  install -m 0775 "$out/rootfs$BIN_PATH" "$st/binmode$BIN_PATH"
  layer binmode "$st/binmode"
  local c=(umoci config --image "$lay:$version" --tag)
  "${c[@]}" root --config.user 0:0
  "${c[@]}" entry --clear config.entrypoint --config.entrypoint /usr/local/bin/leasehold
  "${c[@]}" cmd --clear config.cmd --config.cmd agent
  "${c[@]}" env --clear config.env
  "${c[@]}" port --clear config.exposedports --config.exposedports 9090/tcp
  "${c[@]}" arch --architecture arm64
  "${c[@]}" nolabel --clear config.labels \
    --config.label "org.opencontainers.image.source=$SOURCE_URL" --config.label "org.opencontainers.image.version=$version"
  local d=$st/Dockerfile
  sed 's/^USER .*/USER 1000:1000/' "$dockerfile" >"$d.user"
  sed 's/org.opencontainers.image.version="[^"]*"/org.opencontainers.image.version="0.0.0"/' "$dockerfile" >"$d.version"
  sed 's/^ENTRYPOINT .*/ENTRYPOINT ["\/usr\/local\/bin\/leasehold"]/' "$dockerfile" >"$d.entry"
  sed 's/^CMD .*/CMD ["agent"]/' "$dockerfile" >"$d.cmd"
  sed 's/^ENV .*/ENV MIMALLOC_PURGE_DELAY=1000/' "$dockerfile" >"$d.env"
  sed 's/^EXPOSE .*/EXPOSE 9090/' "$dockerfile" >"$d.expose"
  sed 's/^FROM scratch$/FROM gcr.io\/distroless\/cc-debian12:nonroot/' "$dockerfile" >"$d.base"
  sed 's/^\(COPY --from=build \/out\/rootfs\/ \/\)$/\1\nCOPY --from=build \/bin\/sh \/bin\/sh/' "$dockerfile" >"$d.copy"
  sed 's/^\(USER .*\)$/\1\nVOLUME \/var\/lib\/leasehold/' "$dockerfile" >"$d.volume"
  local name tag df max expect refused
  while IFS='|' read -r name tag df max expect; do
    [ -n "$name" ] || continue
    # Only the missing library needs the unpacked image run; the rest are static checks.
    refused=$( (IMAGE_MAX_MB=${max:-${IMAGE_MAX_MB:-80}} check_image "$lay" "$tag" "${df:-$dockerfile}" \
                 "$([ "$tag" = nolib ] || echo static)" || true) | grep '^FAILED' || true)
    if grep -qF "FAILED $expect" <<<"$refused"; then
      pass "self-test: $name is refused by '$expect…'"
    else
      fail "self-test: $name is refused by '$expect…'"
      printf '%s\n' "${refused:-(every check passed)}" | sed 's/^/    /'
    fi
  done <<EOF
an image with /bin/sh|shell|||no shell
an image with /bin/sh|shell|||the files are exactly
an image with a /usr/bin|usrbin|||no /bin, /sbin
an image without libgcc_s|nolib|||runs as 65532:65532
an image without libgcc_s|nolib|||the files are exactly
an image with a world-writable /etc/passwd|writable|||everything but /tmp
an image with /tmp 0755|tmp|||/tmp is 1777
an image with /leasehold group-writable|binmode|||$BIN_PATH is a root-owned 0755
an image running as root|root|||user is
an image with another entrypoint|entry|||entrypoint is
an image with another command|cmd|||cmd is
an image without the allocator's settings|env|||env is
an image exposing another port|port|||exposes
an image for arm64|arch|||os/architecture
an image without the licenses label|nolabel|||label org.opencontainers.image.licenses
an image over the size bound (5 MiB)|$version||5|compressed size
a Dockerfile with another USER|$version|$d.user||Dockerfile: USER
a Dockerfile with another version label|$version|$d.version||Dockerfile: LABELs
a Dockerfile with another ENTRYPOINT|$version|$d.entry||Dockerfile: ENTRYPOINT
a Dockerfile with another CMD|$version|$d.cmd||Dockerfile: CMD
a Dockerfile with another ENV|$version|$d.env||Dockerfile: ENV
a Dockerfile exposing another port|$version|$d.expose||Dockerfile: EXPOSE
a Dockerfile on a base image|$version|$d.base||Dockerfile: final stage FROM scratch
a Dockerfile copying a shell in|$version|$d.copy||Dockerfile: COPY
a Dockerfile with a VOLUME|$version|$d.volume||Dockerfile: no WORKDIR
EOF
  rm -rf "$st"
}

# run: podman runs the image as the Deployment does (read-only, user 65532, no capabilities,
# /tmp a tmpfs), on the host's network, with `leasehold demo`; /healthz must answer.
cmd_run() {
  tools podman runc curl
  local pd=$out/podman port=$((20000 + RANDOM % 20000)) name=leasehold-image-check-$$ i code=
  rm -rf "$pd"; mkdir -p "$pd/tmp" "$pd/home"
  # Everything podman keeps under $pd: vfs storage (no mounts left behind), its state, runc's
  # (--runtime-flag root), temporary files, its per-user configuration (HOME). Then cgroupfs and
  # file events (no systemd), and runc (Debian's crun refuses hybrid cgroup hierarchies such
  # as the development VM's). What it still writes elsewhere as root — containers/image's
  # blob-info cache in /var/lib/containers/cache, an empty /run/runc — is removed after if this
  # created it.
  local varlib_was_there= runc_was_there=
  [ -e /var/lib/containers ] && varlib_was_there=1
  [ -e /run/runc ] && runc_was_there=1
  local pm=(env HOME="$pd/home" TMPDIR="$pd/tmp" XDG_CONFIG_HOME="$pd/home/.config"
            podman --root "$pd/root" --runroot "$pd/run" --tmpdir "$pd/tmp" --storage-driver vfs
            --cgroup-manager cgroupfs --events-backend file --runtime runc --runtime-flag "root=$pd/runc")
  if ! "${pm[@]}" pull -q "oci:$layout:$version" >"$pd/pull.log" 2>&1; then
    fail "podman loads the image"; sed 's/^/    /' "$pd/pull.log"
    "${pm[@]}" system reset -f >/dev/null 2>&1 || true; rm -rf "$pd"
    [ -n "$varlib_was_there" ] || rm -rf /var/lib/containers
    [ -n "$runc_was_there" ] || rmdir /run/runc 2>/dev/null || true
    return
  fi
  local id
  id=$(tail -1 "$pd/pull.log")
  # Open-files and process limits set low: podman asks for 1048576 files by default, which a
  # machine without CAP_SYS_RESOURCE (the development VM) refuses, and even its own limits
  # (20000 files) were refused there; 8192 files is plenty for the demo.
  if "${pm[@]}" run -d --name "$name" --network host --ulimit nofile=8192:8192 --ulimit nproc=4096:4096 --read-only --tmpfs /tmp --cap-drop all \
      --security-opt no-new-privileges "$id" demo --listen "127.0.0.1:$port" --kube-listen 127.0.0.1:0 \
      --targets 30 >"$pd/run.log" 2>&1; then
    for i in $(seq 60); do
      code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true)
      [ "$code" = 200 ] && break
      sleep 1
    done
    if [ "$code" = 200 ]; then pass "podman runs it (read-only root, no capabilities, demo on 127.0.0.1:$port): /healthz is 200 after ${i} s"
    else fail "podman runs it: /healthz answered '${code}'"; "${pm[@]}" logs "$name" 2>&1 | tail -20 | sed 's/^/    /'; fi
    # The process as the kernel sees it: user 65532, no capabilities, /leasehold.
    local pid uid caps exe
    pid=$("${pm[@]}" inspect -f '{{.State.Pid}}' "$name" 2>/dev/null || echo 0)
    uid=$(awk '/^Uid:/ { print $2 ":" $3 }' "/proc/$pid/status" 2>/dev/null || true)
    caps=$(awk '/^CapEff:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    exe=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -d' ' -f1 || true)
    if [ "$uid" = 65532:65532 ] && [ "$caps" = 0000000000000000 ] && [ "$exe" = "$BIN_PATH" ]; then
      pass "its process is $BIN_PATH, uid 65532, no effective capabilities"
    else
      fail "its process is $BIN_PATH, uid 65532, no effective capabilities (pid $pid: '$exe', uid '$uid', CapEff '$caps')"
    fi
  else
    fail "podman starts the container"; sed 's/^/    /' "$pd/run.log"
  fi
  "${pm[@]}" rm -f -t 5 "$name" >/dev/null 2>&1 || true
  "${pm[@]}" system reset -f >/dev/null 2>&1 || true
  rm -rf "$pd"
  [ -n "$varlib_was_there" ] || rm -rf /var/lib/containers
  [ -n "$runc_was_there" ] || rmdir /run/runc 2>/dev/null || true
}

case "${1:-all}" in
  rootfs) shift; [ $# -ge 1 ] || die "usage: $0 rootfs DIR [BINARY]"; cmd_rootfs "$@"; exit ;;
  build) cmd_build; exit ;;
  check) shift; cmd_check "$@" ;;
  self-test) cmd_self_test ;;
  run) cmd_run ;;
  all)
    start=$SECONDS
    if cmd_build; then pass "built $layout:$version ($((SECONDS - start)) s)"; else fail "build"; echo "$passed passed, $failed failed"; exit 1; fi
    cmd_check
    cmd_self_test
    if [ "${LEASEHOLD_SKIP_IMAGE_RUN:-}" != 1 ]; then cmd_run; fi
    echo "($((SECONDS - start)) s)"
    ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
