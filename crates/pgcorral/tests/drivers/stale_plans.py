#!/usr/bin/env python3
"""Prepared statements while a table gains columns: `SELECT * FROM t` runs over and over on
several connections (psycopg 3 with prepare_threshold=0, or asyncpg with its statement cache)
while something else adds columns to t. PostgreSQL answers the stale statements with "cached
plan must not change result type"; through pgcorral no psycopg query may fail, asyncpg's only
where a column landed again between its re-prepare and the execution (at most 1 in 1,000),
and every row must have as many columns as the result's description says.

psycopg describes each execution (Bind, Describe, Execute, Sync), so pgcorral retries it
itself; asyncpg does not describe, gets the error and prepares again on its own.

    stale_plans.py --driver psycopg|asyncpg --port P [--host H] [--user U] [--database D]
                   [--clients N] [--seconds S]

Prints `stale-plans ok: ...` and exits 0, or prints the first errors and exits 1.
"""

import argparse
import asyncio
import sys
import threading
import time


def check_row(row, width, x, errors):
    if len(row) != width:
        errors.append(f"row of {len(row)} columns, description has {width}")
    elif row[0] != x:
        errors.append(f"first column {row[0]!r}, want {x}")


def run_psycopg(args, errors, widths):
    import psycopg

    counts = []

    def client(i):
        n = 0
        try:
            with psycopg.connect(
                host=args.host, port=args.port, user=args.user, dbname=args.database,
                autocommit=True, prepare_threshold=0,
            ) as conn:
                deadline = time.monotonic() + args.seconds
                while time.monotonic() < deadline:
                    x = (n + i) % 10 + 1
                    cur = conn.execute("SELECT * FROM t WHERE a = %s", (x,))
                    rows = cur.fetchall()
                    width = len(cur.description)
                    widths.add(width)
                    for row in rows:
                        check_row(row, width, x, errors)
                    n += 1
        except psycopg.Error as e:
            errors.append(f"client {i}: {type(e).__name__}: {e}")
        counts.append(n)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts)


def run_asyncpg(args, errors, widths, twice):
    import asyncpg

    async def client(i):
        n = 0
        conn = await asyncpg.connect(
            host=args.host, port=args.port, user=args.user, database=args.database
        )
        try:
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                x = (n + i) % 10 + 1
                try:
                    rows = await conn.fetch("SELECT * FROM t WHERE a = $1", x)
                except asyncpg.InvalidCachedStatementError:
                    # asyncpg prepares again once; when another column lands between that
                    # and the execution (a loaded machine), it gives up: PostgreSQL's own
                    # behaviour, counted apart.
                    twice.append(i)
                    n += 1
                    continue
                for row in rows:
                    width = len(row)  # asyncpg checks each row against its description
                    widths.add(width)
                    check_row(tuple(row.values()), width, x, errors)
                n += 1
        except asyncpg.PostgresError as e:
            errors.append(f"client {i}: {type(e).__name__}: {e}")
        finally:
            await conn.close()
        return n

    async def main():
        return sum(await asyncio.gather(*(client(i) for i in range(args.clients))))

    return asyncio.run(main())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", choices=["psycopg", "asyncpg"], required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", default="postgres")
    ap.add_argument("--database", default="postgres")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4)
    args = ap.parse_args()
    errors, widths, twice = [], set(), []
    if args.driver == "psycopg":
        n = run_psycopg(args, errors, widths)
    else:
        n = run_asyncpg(args, errors, widths, twice)
    # Stale twice in a row may happen now and then; pgcorral failing to pass the error on
    # would make most of the ~100 re-preparations of a run fail.
    if len(twice) > max(1, n // 1000):
        errors.append(f"{len(twice)} executions stale again after asyncpg's re-prepare")
    if errors:
        print(f"{len(errors)} errors in {n} queries:", file=sys.stderr)
        for e in errors[:10]:
            print("  " + e, file=sys.stderr)
        sys.exit(1)
    print(
        f"stale-plans ok: {args.driver}, {n} queries on {args.clients} connections, "
        f"column counts seen {sorted(widths)}, stale again after re-prepare: {len(twice)}"
    )


if __name__ == "__main__":
    main()
