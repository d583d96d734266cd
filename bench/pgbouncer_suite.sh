#!/usr/bin/env bash
# PgBouncer's own test suite (`test/` of its repository) run against the pgcorral binary, as
# issue 37 asks: the tests that pass, file by file, and each failure's first line. Not part of
# CI (it needs PgBouncer's repository, brought with the search tool's `fetch`, and packages from
# PyPI); run it in a session and keep the report.
#
#   bench/pgbouncer_suite.sh                       # builds pgcorral (release), runs every file
#   FILES="test_admin.py test_auth.py" bench/pgbouncer_suite.sh
#   BOUNCER_EXE=/usr/sbin/pgbouncer bench/pgbouncer_suite.sh   # the harness against PgBouncer
#
# Knobs (environment): MIRROR (a bare clone of github.com/pgbouncer/pgbouncer, default
# /work/.mirror/pgbouncer+pgbouncer/repo), REV (the commit whose tests run, default 13a344f2,
# the first with BOUNCER_EXE), FILES (test files, default all), JOBS (pytest-xdist workers, 2),
# BOUNCER_EXE (the binary under test; default a fresh release build of pgcorral), PG_BINDIR
# (PostgreSQL's binaries, initdb first on PATH), BENCH_RESULTS_DIR (default bench/results),
# VENV (default /tmp/pgbouncer-suite-venv), KEEP=1 keeps the work directory, IPV6 (1 when the
# loopback has ::1: the suite's HAVE_IPV6_LOCALHOST, its host-list case over both families),
# USE_SUDO=1 (the suite's cases that drop, reject or delay traffic with iptables and tc; the test
# user needs sudo without a password for them, which this script checks; as root, e.g.
# `apt-get install -y sudo iptables` and `echo 'postgres ALL=(root) NOPASSWD: ALL' >
# /etc/sudoers.d/pgbouncer-suite`; the suite's set-up adds tc's `prio` and `netem` queueing
# disciplines to the loopback, which a kernel without them refuses, failing every case: the
# sandboxes of 2026-11 lack both, so their runs go without).
#
# What it does: extracts `test/`, `include/` and `pyproject.toml` of $REV into a temporary
# directory, writes the `config.mak` the harness reads (`tls_support = yes`, `ldap_support =
# no`), installs the suite's Python packages (pytest, pytest-asyncio, pytest-timeout,
# pytest-xdist, psycopg, filelock) in a virtualenv, and runs pytest as the `postgres` OS user
# when root (initdb refuses root, and the console is reached over the Unix socket as user
# `pgbouncer` by the pooler's own OS user). pytest-asyncio's deprecation warnings are ignored
# (the suite turns warnings into errors, and newer pytest-asyncio warns at start), and
# tracebacks are one line each (Debian's Python 3.11.2 fails to parse some for pytest's long
# form, which stops the run). The report (counts per file, each failure with its
# first line) goes to $BENCH_RESULTS_DIR/YYYY-MM-DD-HHMM-pgbouncer-suite.md and is printed.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
MIRROR=${MIRROR:-/work/.mirror/pgbouncer+pgbouncer/repo}
REV=${REV:-13a344f2}
FILES=${FILES:-}
JOBS=${JOBS:-2}
VENV=${VENV:-/tmp/pgbouncer-suite-venv}
KEEP=${KEEP:-0}
RESULTS=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

git --git-dir="$MIRROR" cat-file -e "$REV^{commit}" 2>/dev/null ||
  die "no commit $REV in $MIRROR (bring PgBouncer's repository with the search tool's fetch: github:pgbouncer/pgbouncer)"
PG_BIN=${PG_BINDIR:-$(find /usr/lib/postgresql -maxdepth 3 -name initdb -path '*/bin/*' 2>/dev/null | sort -V | tail -n1 | xargs -r dirname)}
[ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] || die "PostgreSQL binaries not found (set PG_BINDIR)"

if [ -z "${BOUNCER_EXE:-}" ]; then
  log "cargo build --release -p pgcorral"
  (cd "$ROOT" && cargo build --release -p pgcorral >&2)
  BOUNCER_EXE=${CARGO_TARGET_DIR:-$ROOT/target}/release/pgcorral
fi
[ -x "$BOUNCER_EXE" ] || die "$BOUNCER_EXE is not an executable"

WORK=$(mktemp -d /tmp/pgbouncer-suite.XXXXXX)
cleanup() { [ "$KEEP" = 1 ] && log "kept $WORK" || rm -rf "$WORK"; }
trap cleanup EXIT
git --git-dir="$MIRROR" archive "$REV" test include pyproject.toml | tar -x -C "$WORK"
printf 'tls_support = yes\nldap_support = no\n' >"$WORK/config.mak"
# The binary runs as the test user from a place that user can read.
cp "$BOUNCER_EXE" "$WORK/bouncer-under-test"

if [ ! -x "$VENV/bin/pytest" ]; then
  log "virtualenv $VENV with the suite's packages"
  # The system's python, not one under root's home: the tests run as another OS user.
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$py" -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv)"
  "$VENV/bin/pip" install --quiet pytest pytest-asyncio pytest-timeout pytest-xdist 'psycopg[binary]' filelock
fi

# Paths as seen from test/: the harness changes into that directory when it is imported, and
# pytest-xdist's workers collect from there.
targets=()
if [ -n "$FILES" ]; then
  for f in $FILES; do targets+=("$f"); done
else
  targets=(.)
fi
as_user=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || die "run as root: the postgres OS user is needed"
  chown -R postgres "$WORK"
  chmod -R a+rX "$VENV"
  as_user=(runuser -u postgres --)
fi
suite_env=()
if [ "${IPV6:-$(ip -6 addr show dev lo 2>/dev/null | grep -q '::1/128' && echo 1)}" = 1 ]; then
  suite_env+=(HAVE_IPV6_LOCALHOST=1)
fi
if [ -n "${USE_SUDO:-}" ]; then
  "${as_user[@]}" sudo -n true 2>/dev/null ||
    die "USE_SUDO: the test user cannot sudo without a password (see the header)"
  for tool in iptables tc; do
    "${as_user[@]}" sudo -n "$(command -v $tool || echo $tool)" --version >/dev/null 2>&1 ||
      "${as_user[@]}" sudo -n "$(command -v $tool || echo $tool)" -V >/dev/null 2>&1 ||
      die "USE_SUDO: $tool does not run"
  done
  suite_env+=(USE_SUDO=1)
fi
version=$("$WORK/bouncer-under-test" --version | head -n1)
log "running PgBouncer's tests ($REV) against $version: ${targets[*]} ${suite_env[*]}"
started=$(date +%s)
set +e
(cd "$WORK/test" && "${as_user[@]}" env PATH="$PG_BIN:$PATH" BOUNCER_EXE="$WORK/bouncer-under-test" "${suite_env[@]}" \
  "$VENV/bin/pytest" -n "$JOBS" -p no:cacheprovider -q --junitxml="$WORK/junit.xml" \
  -W "ignore::pytest.PytestDeprecationWarning" --tb=line --no-showlocals "${targets[@]}" \
  >"$WORK/pytest.log" 2>&1)
rc=$?
set -e
took=$(( $(date +%s) - started ))
[ -s "$WORK/junit.xml" ] || { tail -n 50 "$WORK/pytest.log" >&2; die "pytest wrote no results (exit $rc)"; }

mkdir -p "$RESULTS"
stamp=$(date +%Y-%m-%d-%H%M)
report="$RESULTS/$stamp-pgbouncer-suite.md"
python3 - "$WORK/junit.xml" "$version" "$REV" "$took" "$(git -C "$ROOT" rev-parse --short HEAD)" "${suite_env[*]:-}" >"$report" <<'EOF'
import sys, collections, xml.etree.ElementTree as ET
path, version, rev, took, head, env = sys.argv[1:]
per = collections.OrderedDict()
fails = []
for case in ET.parse(path).getroot().iter("testcase"):
    file = case.get("classname", "").removeprefix("test.") + ".py"
    name = case.get("name")
    outcome = "passed"
    for tag in ("failure", "error", "skipped"):
        el = case.find(tag)
        if el is not None:
            outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            msg = (el.get("message") or el.text or "").strip().splitlines()
            first = msg[0][:200] if msg else ""
            if tag != "skipped":
                fails.append((file, name, outcome, first))
            break
    per.setdefault(file, collections.Counter())[outcome] += 1
tot = collections.Counter()
for c in per.values():
    tot.update(c)
ran = tot["passed"] + tot["failed"] + tot["error"]
print(f"# PgBouncer's test suite against {version}\n")
print(f"PgBouncer tests at {rev}; pgcorral git {head}; took {took} s. "
      f"Passed {tot['passed']} of {ran} run ({tot['skipped']} skipped by the suite itself); "
      f"suite environment: {env or 'none'}.\n")
print("| file | passed | failed | error | skipped |\n|---|---:|---:|---:|---:|")
for f, c in sorted(per.items()):
    print(f"| {f} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} |")
print(f"| **total** | **{tot['passed']}** | {tot['failed']} | {tot['error']} | {tot['skipped']} |\n")
print("## Failures (first line of each)\n")
for f, n, o, m in fails:
    m = m.replace("|", "\\|")
    print(f"- `{f}::{n}` ({o}): {m}")
EOF
cat "$report"
log "report: $report"
