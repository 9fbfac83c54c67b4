# Sourced by scripts/test: where $CALL4AGENTS_TEST_POSTGRES_URL is unset and PostgreSQL's server
# programs are installed (Debian's /usr/lib/postgresql/*/bin, or on PATH), start a throwaway
# server of the run's own on a free port (the tests' own helper, tests/postgres/helpers.py),
# point the tests at it, and stop and delete it when the run ends.
# Without the programs the PostgreSQL tests skip, saying why (with CI=true they fail).
c4a_pg_python=${PYTHON:-.venv/bin/python}

c4a_pg_start() {
  local found code=0 port errors
  errors=$(mktemp -t c4a-test-pg-XXXXXX)
  found=$("$c4a_pg_python" -m tests.postgres.helpers start 2>"$errors") || code=$?
  if [ "$code" -eq 3 ]; then
    echo "PostgreSQL tests: no CALL4AGENTS_TEST_POSTGRES_URL, and $found: they skip"
  elif [ "$code" -ne 0 ]; then
    echo "PostgreSQL tests: the throwaway server did not start ($(tail -n 1 "$errors")): they skip"
  fi
  rm -f "$errors"
  [ "$code" -eq 0 ] || return 0
  read -r port C4A_PG_ROOT <<<"$found"
  trap c4a_pg_stop EXIT
  export CALL4AGENTS_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$port/test"
  echo "PostgreSQL tests: on a throwaway server of this run, 127.0.0.1:$port (data in $C4A_PG_ROOT), stopped and deleted after it"
}

c4a_pg_stop() {
  "$c4a_pg_python" -m tests.postgres.helpers stop "$C4A_PG_ROOT" >/dev/null 2>&1 || true
}

if [ -z "${CALL4AGENTS_TEST_POSTGRES_URL:-}" ]; then
  c4a_pg_start
else
  echo "PostgreSQL tests: on the server of CALL4AGENTS_TEST_POSTGRES_URL"
fi
