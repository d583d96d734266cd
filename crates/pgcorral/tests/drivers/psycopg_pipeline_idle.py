#!/usr/bin/env python3
"""psycopg 3 pipeline mode and executemany, then idle: the pooler must give the server back.

psycopg ends a pipeline (and executemany, which runs in one) with Sync and then Flush; a pooler
that took the Flush for an unfinished batch would keep the server while the connection sits
idle. Through a transaction-mode pool of ONE server: connection A (autocommit,
prepare_threshold=0) runs a pipeline, then executemany, and after each stays idle while
connection B must get the server for a query within 5 seconds.

    psycopg_pipeline_idle.py --host H --port P --user U --database D

Prints `psycopg-pipeline ok: ...` and exits 0, or prints the error and exits 1.
"""

import argparse
import sys
import time

try:
    import psycopg
except ImportError:
    print("psycopg 3 is not installed: python3 -m pip install 'psycopg[binary]'", file=sys.stderr)
    sys.exit(3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", default="postgres")
    ap.add_argument("--database", default="postgres")
    args = ap.parse_args()
    dsn = dict(host=args.host, port=args.port, user=args.user, dbname=args.database)

    a = psycopg.connect(**dsn, autocommit=True, prepare_threshold=0)
    b = psycopg.connect(**dsn, autocommit=True, options="-c statement_timeout=5000")
    a.execute("DROP TABLE IF EXISTS pipeline_items")
    a.execute("CREATE TABLE pipeline_items (id int, label text)")

    def b_gets_the_server(after):
        start = time.monotonic()
        got = b.execute("SELECT 41 + 1").fetchone()[0]
        took = time.monotonic() - start
        if got != 42:
            raise SystemExit(f"after {after}: B got {got!r}")
        if took > 5:
            raise SystemExit(f"after {after}: B waited {took:.1f} s for the server")
        return took

    waits = []
    with a.pipeline():
        c1 = a.execute("SELECT %s::int * 2", (21,))
        c2 = a.execute("INSERT INTO pipeline_items VALUES (%s, %s)", (0, "zero"))
        c3 = a.execute("SELECT count(*) FROM pipeline_items")
    if c1.fetchone()[0] != 42 or c3.fetchone()[0] != 1:
        raise SystemExit("pipeline results wrong")
    waits.append(b_gets_the_server("a pipeline"))

    with a.cursor() as cur:
        cur.executemany(
            "INSERT INTO pipeline_items VALUES (%s, %s)",
            [(i, f"item {i}") for i in range(1, 51)],
        )
    waits.append(b_gets_the_server("executemany"))

    # A again, after B: its prepared statements still work on the one server.
    n = a.execute("SELECT count(*) FROM pipeline_items WHERE id >= %s", (1,)).fetchone()[0]
    if n != 50:
        raise SystemExit(f"executemany inserted {n} rows, want 50")
    a.execute("DROP TABLE pipeline_items")
    print(f"psycopg-pipeline ok: B waited at most {max(waits) * 1000:.0f} ms after each")


if __name__ == "__main__":
    try:
        main()
    except psycopg.Error as e:
        print(f"psycopg error: {e}", file=sys.stderr)
        sys.exit(1)
