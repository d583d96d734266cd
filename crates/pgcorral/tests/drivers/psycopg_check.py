#!/usr/bin/env python3
"""psycopg 3 through pgcorral: many connections (one thread each) over a transaction-mode pool
of a few servers, with prepare_threshold=0, so every query is prepared server-side on first use
(`_pg3_N`, numbered per connection) and its name reused in later transactions, which the pooler
runs on whatever server is free.

psycopg prepares with PQsendPrepare (Parse, Sync) and executes with PQsendQueryPrepared (Bind,
Describe, Execute, Sync): the two are in separate Syncs, so outside a transaction the Bind may
reach another server than the Parse. Connections run the same texts in different orders (the
same name stands for different texts on different connections); half are autocommit, half run
each round in one implicit transaction (savepoints for the nested blocks); half keep at most 4
prepared statements (psycopg closes the evicted ones). Also: pipeline mode, executemany,
transactions that commit and roll back (psycopg answers a ROLLBACK with DEALLOCATE ALL), SQL
PREPARE/EXECUTE/DEALLOCATE (the same statement name, a different text, on every connection;
these, and DISCARD ALL, go by the simple protocol, as psycopg sends a query without parameters
that it does not prepare), and DISCARD ALL, after which the connection's SQL-level statement is
gone. Every result is checked.

    psycopg_check.py [--host H] [--port P] [--user U] [--database D] [--clients N] [--rounds R]

Defaults come from PGHOST, PGPORT, PGUSER and PGDATABASE. Prints one line, `psycopg ok: ...`,
and exits 0; or prints the errors and exits 1.
"""

import argparse
import os
import sys
import threading
import time
from decimal import Decimal

try:
    import psycopg
    from psycopg.types.json import Jsonb
except ImportError:
    print("psycopg 3 is not installed: python3 -m pip install 'psycopg[binary]'", file=sys.stderr)
    sys.exit(3)

ITEMS = 10


class Mismatch(Exception):
    pass


def check(what, got, want):
    if got != want:
        raise Mismatch(f"{what}: got {got!r}, want {want!r}")


# (name, text, parameters for connection c in round r, expected rows)
QUERIES = [
    ("add", "SELECT %s::int4 + %s::int4", lambda c, r: (c, r), lambda c, r: [(c + r,)]),
    (
        "concat",
        "SELECT %s::text || ':' || %s::int8::text",
        lambda c, r: (f"c{c}", r * 1_000_000_007),
        lambda c, r: [(f"c{c}:{r * 1_000_000_007}",)],
    ),
    (
        "series",
        "SELECT g, g * %s::int4 AS m FROM generate_series(1, %s::int4) AS g",
        lambda c, r: (c, r % 7 + 1),
        lambda c, r: [(g, g * c) for g in range(1, r % 7 + 2)],
    ),
    (
        "row",
        "SELECT %s::float8 * 2 AS f, NOT %s::bool AS b, %s::bytea AS raw",
        lambda c, r: (r + 0.5, c % 2 == 0, bytes([c % 256, r % 256])),
        lambda c, r: [((r + 0.5) * 2, c % 2 != 0, bytes([c % 256, r % 256]))],
    ),
    (
        "item",
        "SELECT v FROM psycopg_items WHERE client = %s AND i = %s",
        lambda c, r: (c, r % ITEMS),
        lambda c, r: [(f"item {c}/{r % ITEMS}",)],
    ),
    (
        "json",
        "SELECT %s::jsonb -> 'k'",
        lambda c, r: (Jsonb({"k": [c, r]}),),
        lambda c, r: [([c, r],)],
    ),
    (
        "numeric",
        "SELECT %s::numeric * 2",
        lambda c, r: (Decimal(f"{c}.{r:02d}"),),
        lambda c, r: [(Decimal(f"{c}.{r:02d}") * 2,)],
    ),
    ("pid", "SELECT pg_backend_pid()", lambda c, r: (), None),
]


def counter_of(conn, c):
    return conn.execute("SELECT n FROM psycopg_counters WHERE client = %s", (c,)).fetchone()[0]


def client(a, c, stats, lock):
    """One connection's whole run; raises on the first error or mismatch."""
    autocommit = c % 2 == 0
    conn = psycopg.connect(
        host=a.host,
        port=a.port,
        user=a.user,
        dbname=a.database,
        connect_timeout=30,
        sslmode="disable",
        autocommit=autocommit,
        prepare_threshold=0,
    )
    if c % 4 >= 2:
        conn.prepared_max = 4
    pids = set()
    counter = 0
    queries = 0
    where = "connected"
    try:
        order = QUERIES[c % len(QUERIES) :] + QUERIES[: c % len(QUERIES)]
        for r in range(a.rounds):
            for name, text, params, want in order:
                where = f"round {r} {name}"
                rows = conn.execute(text, params(c, r)).fetchall()
                queries += 1
                if want is None:
                    pids.add(rows[0][0])
                else:
                    check(where, rows, want(c, r))

            if r % 3 == 0:
                where = f"round {r} transaction"
                with conn.transaction():
                    n = conn.execute(
                        "UPDATE psycopg_counters SET n = n + 1 WHERE client = %s RETURNING n", (c,)
                    ).fetchone()[0]
                    check(where + " update", n, counter + 1)
                    check(where + " read back", counter_of(conn, c), counter + 1)
                    pids.add(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
                counter += 1
                queries += 3
            elif r % 3 == 1:
                where = f"round {r} rollback"
                with conn.transaction():
                    n = conn.execute(
                        "UPDATE psycopg_counters SET n = n + 1 WHERE client = %s RETURNING n", (c,)
                    ).fetchone()[0]
                    check(where + " update", n, counter + 1)
                    raise psycopg.Rollback()
                check(where + " after", counter_of(conn, c), counter)
                queries += 2

            if r % 4 == 2:
                where = f"round {r} pipeline"
                with conn.pipeline():
                    curs = [conn.execute("SELECT %s::int4 + %s::int4", (r, k)) for k in range(5)]
                    curs.append(conn.execute("SELECT v FROM psycopg_items WHERE client = %s AND i = %s", (c, 1)))
                for k, cur in enumerate(curs[:5]):
                    check(f"{where} {k}", cur.fetchone(), (r + k,))
                check(f"{where} item", curs[5].fetchone(), (f"item {c}/1",))
                queries += 6

            if r % 5 == 3:
                where = f"round {r} executemany"
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO psycopg_log (client, round, k) VALUES (%s, %s, %s)",
                        [(c, r, k) for k in range(5)],
                    )
                got = conn.execute(
                    "SELECT count(*) FROM psycopg_log WHERE client = %s AND round = %s", (c, r)
                ).fetchone()
                check(where, got, (5,))
                queries += 6

            # SQL-level prepared statements: PREPARE in one round, EXECUTE in it and in the next,
            # then DEALLOCATE. The name is the same on every connection, the text is not.
            if r % 6 == 4:
                where = f"round {r} sql prepare"
                conn.execute(f"PREPARE mine(int4) AS SELECT $1 * 1000 + {c}", prepare=False)
                check(where, conn.execute(f"EXECUTE mine({r})", prepare=False).fetchone(), (r * 1000 + c,))
                queries += 2
            elif r % 6 == 5:
                where = f"round {r} sql execute"
                check(where, conn.execute(f"EXECUTE mine({r})", prepare=False).fetchone(), (r * 1000 + c,))
                conn.execute("DEALLOCATE mine", prepare=False)
                queries += 2

            # DISCARD ALL (outside a transaction only) drops this connection's statements, SQL
            # ones included; psycopg then forgets its own and prepares them again.
            if autocommit and r % 10 == 7:
                where = f"round {r} discard all"
                conn.execute(f"PREPARE doomed AS SELECT {c}", prepare=False)
                check(where + " before", conn.execute("EXECUTE doomed", prepare=False).fetchone(), (c,))
                conn.execute("DISCARD ALL", prepare=False)
                try:
                    conn.execute("EXECUTE doomed", prepare=False)
                    raise Mismatch(f"{where}: statement 'doomed' still exists after DISCARD ALL")
                except psycopg.errors.InvalidSqlStatementName:
                    pass
                check(where + " after", conn.execute("SELECT %s::int4 * 2", (c,)).fetchone(), (c * 2,))
                queries += 5

            if not autocommit:
                where = f"round {r} commit"
                conn.commit()
        where = "end"
        check("final counter", counter_of(conn, c), counter)
        if not autocommit:
            conn.commit()
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise RuntimeError(f"connection {c}, {where}: {type(e).__name__}: {first}") from e
    finally:
        conn.close()
    with lock:
        stats["queries"] += queries
        stats["pids"] |= pids
        if len(pids) > 1:
            stats["moved"] += 1


SETUP = """
DROP TABLE IF EXISTS psycopg_items, psycopg_counters, psycopg_log;
CREATE TABLE psycopg_items (client int, i int, v text NOT NULL, PRIMARY KEY (client, i));
INSERT INTO psycopg_items
  SELECT c, i, format('item %s/%s', c, i) FROM generate_series(0, {last}) c, generate_series(0, {items}) i;
CREATE TABLE psycopg_counters (client int PRIMARY KEY, n int NOT NULL);
INSERT INTO psycopg_counters SELECT c, 0 FROM generate_series(0, {last}) c;
CREATE TABLE psycopg_log (client int, round int, k int);
"""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=os.environ.get("PGHOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PGPORT", "6432")))
    p.add_argument("--user", default=os.environ.get("PGUSER", "postgres"))
    p.add_argument("--database", default=os.environ.get("PGDATABASE", "postgres"))
    p.add_argument("--clients", type=int, default=40)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--timeout", type=float, default=120, help="seconds for the whole run")
    return p.parse_args()


def main():
    a = parse_args()
    with psycopg.connect(
        host=a.host, port=a.port, user=a.user, dbname=a.database, connect_timeout=30,
        sslmode="disable", autocommit=True,
    ) as setup:
        # Several statements in one string: the simple protocol.
        setup.execute(SETUP.format(last=a.clients - 1, items=ITEMS - 1).encode(), prepare=False)
    stats = {"queries": 0, "pids": set(), "moved": 0}
    lock = threading.Lock()
    errors = []

    def run(c):
        try:
            client(a, c, stats, lock)
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(str(e))

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in range(a.clients)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + a.timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        print(f"psycopg FAILED: not done after {a.timeout} s", file=sys.stderr)
        for e in errors[:10]:
            print(f"  {e}", file=sys.stderr)
        os._exit(1)  # the stuck threads are daemons; do not wait for them
    if errors:
        print(f"psycopg FAILED: {len(errors)} of {a.clients} connections failed", file=sys.stderr)
        for e in errors[:10]:
            print(f"  {e}", file=sys.stderr)
        sys.exit(1)
    print(
        f"psycopg ok: {a.clients} connections, {a.rounds} rounds, {stats['queries']} queries checked, "
        f"{len(stats['pids'])} server backends seen, {stats['moved']}/{a.clients} connections on more than one"
    )


if __name__ == "__main__":
    main()
