#!/usr/bin/env bash
# Throwaway PostgreSQL for tests: one server on 127.0.0.1 at a free port, trust auth for the
# user `leasehold`, data in a temporary directory, fsync off, and TLS offered with a throwaway
# CA (when openssl is installed). Never for real data.
#
#   scripts/postgres.sh start DIR        start a server whose state lives under DIR; prints the
#                                        URL and writes it to DIR/url
#   scripts/postgres.sh stop DIR         stop it and delete its data (DIR/postgres.log is kept)
#   scripts/postgres.sh run -- CMD...    start in a temp dir, run CMD with
#                                        LEASEHOLD_TEST_POSTGRES_URL (and, with TLS,
#                                        LEASEHOLD_TEST_POSTGRES_CA) set, stop; exits with CMD's
#                                        status
#
# The URL is postgres://leasehold@127.0.0.1:PORT/postgres (no password). Tests create their own
# uniquely named databases in it (see src/store/tests.rs). With openssl, the server also speaks
# TLS (ssl=on, plain connections still allowed) with a certificate for 127.0.0.1 signed by a CA
# made for this server alone; the CA certificate is DIR/ca.crt.
#
# PostgreSQL refuses to run as root: as root the server runs as an unprivileged user
# (LEASEHOLD_PG_USER, default `nobody`) and its data directory is a temp dir that user owns.
#
# Environment:
#   LEASEHOLD_PG_BIN     directory holding initdb and pg_ctl (default: PATH, then the newest
#                        /usr/lib/postgresql/*/bin)
#   LEASEHOLD_PG_USER    user to run the server as when invoked as root (default: nobody)
#   LEASEHOLD_PG_KEEP=1  `run` keeps its temp dir (the server log) instead of deleting it
set -euo pipefail

die() {
  echo "postgres.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Sets INITDB and PG_CTL, or explains how to get them.
find_binaries() {
  local dir=""
  if [ -n "${LEASEHOLD_PG_BIN:-}" ]; then
    dir=$LEASEHOLD_PG_BIN
  elif command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dir=$(dirname "$(command -v initdb)")
  else
    # Debian/Ubuntu keep the server binaries off PATH; take the highest version.
    local d
    dir=$(for d in /usr/lib/postgresql/*/bin; do
      if [ -x "$d/initdb" ]; then echo "$d"; fi
    done | sort -V | tail -n 1)
  fi
  INITDB=${dir:+$dir/}initdb
  PG_CTL=${dir:+$dir/}pg_ctl
  if [ -z "$dir" ] || [ ! -x "$INITDB" ] || [ ! -x "$PG_CTL" ]; then
    cat >&2 <<'EOF'
postgres.sh: PostgreSQL server binaries (initdb, pg_ctl) not found.
Install them, e.g. on Debian/Ubuntu:
    apt-get install -y postgresql
(or point LEASEHOLD_PG_BIN at a directory holding initdb and pg_ctl).
EOF
    exit 1
  fi
}

# Sets RUN_AS: empty when we are not root, else the unprivileged user the server runs as.
pick_user() {
  RUN_AS=""
  if [ "$(id -u)" -eq 0 ]; then
    RUN_AS=${LEASEHOLD_PG_USER:-nobody}
    id -u "$RUN_AS" >/dev/null 2>&1 ||
      die "running as root and user '$RUN_AS' does not exist; set LEASEHOLD_PG_USER to an unprivileged user"
  fi
}

# Runs a command as the server's user, from / (the caller's cwd may be unreadable to it).
as_pg() {
  if [ -z "$RUN_AS" ]; then
    (cd / && "$@")
  elif command -v runuser >/dev/null 2>&1; then
    (cd / && runuser -u "$RUN_AS" -- "$@")
  elif command -v setpriv >/dev/null 2>&1; then
    local uid gid
    uid=$(id -u "$RUN_AS")
    gid=$(id -g "$RUN_AS")
    (cd / && setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@")
  else
    die "running as root but neither runuser nor setpriv is available to drop privileges"
  fi
}

# A TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  local port tries=0
  while [ $tries -lt 200 ]; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
    tries=$((tries + 1))
  done
  die "no free port found"
}

cmd_start() {
  local dir=$1
  find_binaries
  pick_user
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ -e "$dir/pgdata" ] && die "$dir already holds a server (run: $0 stop $dir)"

  # The server's files: under DIR when we run it ourselves; as root, a temp dir owned by the
  # server's user (DIR may sit somewhere that user cannot enter, like /root).
  local base
  if [ -z "$RUN_AS" ]; then
    base=$dir/pg
    mkdir -p "$base"
  else
    base=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-pg.XXXXXX")
    chmod 0755 "$base"
    chown "$RUN_AS:" "$base"
  fi
  echo "$base" >"$dir/pgdata"

  as_pg "$INITDB" -D "$base/data" -U leasehold --auth=trust --no-locale -E UTF8 --no-sync \
    >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    die "initdb failed"
  }

  # TLS: a CA of its own and a server certificate for 127.0.0.1 (verify-full checks the IP).
  local tls=""
  if command -v openssl >/dev/null 2>&1; then
    (
      cd "$dir"
      openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=leasehold test CA" \
        -keyout ca.key -out ca.crt
      openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr
      printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
      openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile server.ext -out server.crt
    ) >"$dir/openssl.log" 2>&1 || {
      cat "$dir/openssl.log" >&2
      die "making the TLS certificates failed"
    }
    cp "$dir/server.crt" "$dir/server.key" "$base/"
    rm -f "$dir/ca.key" "$dir/server.key" "$dir/server.csr" "$dir/server.ext" "$dir/ca.srl"
    chmod 0600 "$base/server.key"
    [ -z "$RUN_AS" ] || chown "$RUN_AS:" "$base/server.crt" "$base/server.key"
    tls="-c ssl=on -c ssl_cert_file=$base/server.crt -c ssl_key_file=$base/server.key"
  fi

  local port _
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    if as_pg "$PG_CTL" -D "$base/data" -l "$base/postgres.log" -w -t 60 -o \
      "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$base -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 $tls" \
      start >/dev/null 2>&1; then
      local url="postgres://leasehold@127.0.0.1:$port/postgres"
      echo "$url" >"$dir/url"
      echo "$url"
      return 0
    fi
    # Most likely someone took the port between the probe and the bind: try another.
    as_pg "$PG_CTL" -D "$base/data" -m immediate stop >/dev/null 2>&1 || true
  done
  cat "$base/postgres.log" >&2 || true
  die "the server did not start (log above)"
}

cmd_stop() {
  local dir=$1
  [ -f "$dir/pgdata" ] || die "no server recorded in $dir (missing $dir/pgdata)"
  find_binaries
  pick_user
  local base
  base=$(cat "$dir/pgdata")
  if [ -d "$base/data" ]; then
    as_pg "$PG_CTL" -D "$base/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
      echo "postgres.sh: pg_ctl stop failed (already stopped?)" >&2
  fi
  cp "$base/postgres.log" "$dir/postgres.log" 2>/dev/null || true
  rm -rf "$base"
  rm -f "$dir/pgdata" "$dir/url" "$dir/initdb.log" "$dir/ca.crt" "$dir/server.crt" "$dir/openssl.log"
}

cmd_run() {
  [ $# -gt 0 ] || usage
  local dir status=0
  dir=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-pg-run.XXXXXX")
  # shellcheck disable=SC2064 # expand $dir now
  trap "'$0' stop '$dir' >/dev/null 2>&1 || true; [ \"\${LEASEHOLD_PG_KEEP:-}\" = 1 ] || rm -rf '$dir'" EXIT
  LEASEHOLD_TEST_POSTGRES_URL=$(cmd_start "$dir")
  export LEASEHOLD_TEST_POSTGRES_URL
  echo "postgres.sh: LEASEHOLD_TEST_POSTGRES_URL=$LEASEHOLD_TEST_POSTGRES_URL" >&2
  if [ -f "$dir/ca.crt" ]; then
    export LEASEHOLD_TEST_POSTGRES_CA=$dir/ca.crt
    echo "postgres.sh: LEASEHOLD_TEST_POSTGRES_CA=$LEASEHOLD_TEST_POSTGRES_CA (TLS on)" >&2
  fi
  "$@" || status=$?
  return "$status"
}

case "${1:-}" in
  start)
    [ $# -eq 2 ] || usage
    cmd_start "$2"
    ;;
  stop)
    [ $# -eq 2 ] || usage
    cmd_stop "$2"
    ;;
  run)
    shift
    [ "${1:-}" = "--" ] && shift
    cmd_run "$@"
    ;;
  *) usage ;;
esac
