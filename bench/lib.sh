# shellcheck shell=bash
# Shell functions the benchmark scripts share (sourced; each script defines `log` first).

# stop_pid PID NAME [TENTHS]: SIGTERM, up to TENTHS tenths of a second (default 100) for the
# process to go, then SIGKILL; reaped either way (its exit status is not the caller's).
stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < ${3:-100}; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$2 (pid $pid) did not stop on SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  return 0
}

# cleanup_on_exit: the script's `cleanup` runs when it exits, on an error or a signal too.
cleanup_on_exit() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
}

# pg_initdb DIR LOG: a new cluster in DIR (made and owned by the user `as_pg` runs as), trust
# authentication, no fsync at initdb; initdb's output to LOG.
pg_initdb() {
  mkdir -p "$1"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$1"; fi
  chmod 700 "$1"
  as_pg "$PG_BIN/initdb" -D "$1" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$2" 2>&1 ||
    die "initdb failed; see $2"
}
