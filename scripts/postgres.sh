# Sourced by scripts/test: where $CALL4AGENTS_TEST_POSTGRES_URL is unset and PostgreSQL's server
# programs are installed (Debian's /usr/lib/postgresql/*/bin), start a throwaway server of the
# run's own on a free port, point the tests at it, and stop and delete it when the run ends.
# Without the programs the PostgreSQL tests skip, saying why (with CI=true they fail).
c4a_pg_bin() {  # the newest installed version's program $1, else one on PATH
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1)
  [ -n "$found" ] || found=$(command -v "$1" || true)
  echo "$found"
}

c4a_pg_as_owner() {  # PostgreSQL refuses to run as root: run its programs as postgres then
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

c4a_pg_start() {
  local initdb pg_ctl port
  initdb=$(c4a_pg_bin initdb)
  pg_ctl=$(c4a_pg_bin pg_ctl)
  if [ -z "$initdb" ] || [ -z "$pg_ctl" ]; then
    echo "PostgreSQL tests: no CALL4AGENTS_TEST_POSTGRES_URL and no initdb to start a server: they skip"
    return 0
  fi
  C4A_PG_ROOT=$(mktemp -d -t c4a-test-pg-XXXXXX)
  [ "$(id -u)" -eq 0 ] && chown postgres "$C4A_PG_ROOT"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # No fsync: a throwaway server must not flood a disk others share, and nothing outlives the run.
  if ! c4a_pg_as_owner "$initdb" -D "$C4A_PG_ROOT/data" -U postgres --auth=trust --no-sync >"$C4A_PG_ROOT/initdb.log" 2>&1 ||
    ! c4a_pg_as_owner "$pg_ctl" -D "$C4A_PG_ROOT/data" -l "$C4A_PG_ROOT/log" -w -t 600 \
      -o "-p $port -k $C4A_PG_ROOT -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null ||
    ! c4a_pg_as_owner "$(c4a_pg_bin createdb)" -h 127.0.0.1 -p "$port" -U postgres test; then
    echo "PostgreSQL tests: the throwaway server did not start (see $C4A_PG_ROOT): they skip"
    return 0
  fi
  trap c4a_pg_stop EXIT
  export CALL4AGENTS_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$port/test"
  echo "PostgreSQL tests: on a throwaway server of this run, 127.0.0.1:$port (data in $C4A_PG_ROOT), stopped and deleted after it"
}

c4a_pg_stop() {
  c4a_pg_as_owner "$(c4a_pg_bin pg_ctl)" -D "$C4A_PG_ROOT/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$C4A_PG_ROOT"
}

if [ -z "${CALL4AGENTS_TEST_POSTGRES_URL:-}" ]; then
  c4a_pg_start
else
  echo "PostgreSQL tests: on the server of CALL4AGENTS_TEST_POSTGRES_URL"
fi
