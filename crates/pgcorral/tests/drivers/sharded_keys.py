#!/usr/bin/env python3
"""psycopg 3 and asyncpg through a sharded pgcorral database, routed by their parameters.

The database `app` has a sharded table accounts(aid int4 key, v text). Keys 1..N/2 are written
with asyncpg (`$1` parameters in binary, statements prepared with a Parse and Describe before
their Bind), keys N/2+1..N with psycopg (server-side binding, text and binary, prepared
statements too), the first 8 of each in one INSERT whose rows span shards (and a psycopg
INSERT of rows on several shards that fails on one, which must leave no row behind); every key is then read back through both drivers, in and out of explicit
transactions. The test that runs this checks on each shard that every key is where
PostgreSQL's hash partitioning puts it.

    sharded_keys.py --port P [--host H] [--user U] [--database D] [--keys N]

Prints `sharded ok: ...` and exits 0; or prints the errors and exits 1.
"""

import argparse
import asyncio
import sys

try:
    import asyncpg
    import psycopg
except ImportError as e:
    print(f"{e}: python3 -m pip install asyncpg 'psycopg[binary]'", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", default="postgres")
    ap.add_argument("--database", default="app")
    ap.add_argument("--keys", type=int, default=200)
    a = ap.parse_args()
    errors = []
    half = a.keys // 2

    async def asyncpg_writes():
        c = await asyncpg.connect(host=a.host, port=a.port, user=a.user, database=a.database)
        try:
            # One INSERT of rows on several shards, its values as parameters: split.
            args = [x for k in range(1, 9) for x in (k, f"v{k}")]
            values = ", ".join(f"(${2 * i + 1}, ${2 * i + 2})" for i in range(8))
            got = await c.fetch(
                f"INSERT INTO accounts (aid, v) VALUES {values} RETURNING aid", *args
            )
            if sorted(r["aid"] for r in got) != list(range(1, 9)):
                errors.append(f"asyncpg split INSERT returned {got!r}")
            for k in range(9, half + 1):
                await c.execute("INSERT INTO accounts (aid, v) VALUES ($1, $2)", k, f"v{k}")
        finally:
            await c.close()

    async def asyncpg_reads():
        c = await asyncpg.connect(host=a.host, port=a.port, user=a.user, database=a.database)
        try:
            for k in range(1, a.keys + 1):
                v = await c.fetchval("SELECT v FROM accounts WHERE aid = $1", k)
                if v != f"v{k}":
                    errors.append(f"asyncpg read {k}: {v!r}")
            async with c.transaction():
                await c.execute("UPDATE accounts SET v = $2 WHERE aid = $1", 1, "v1")
                v = await c.fetchval("SELECT v FROM accounts WHERE aid = $1", 1)
                if v != "v1":
                    errors.append(f"asyncpg in a transaction: {v!r}")
            stmt = await c.prepare("SELECT v FROM accounts WHERE aid = $1")
            for k in (2, 3, a.keys):
                v = await stmt.fetchval(k)
                if v != f"v{k}":
                    errors.append(f"asyncpg prepared {k}: {v!r}")
        finally:
            await c.close()

    asyncio.run(asyncpg_writes())

    with psycopg.connect(
        host=a.host, port=a.port, user=a.user, dbname=a.database, autocommit=True
    ) as conn:
        first = list(range(half + 1, half + 9))
        cur = conn.execute(
            "INSERT INTO accounts (aid, v) VALUES " + ", ".join(["(%s, %s)"] * len(first)),
            [x for k in first for x in (k, f"v{k}")],
        )
        if cur.rowcount != len(first):
            errors.append(f"psycopg split INSERT: rowcount {cur.rowcount}")
        # A split INSERT that fails on one shard leaves nothing on any.
        try:
            conn.execute(
                "INSERT INTO accounts (aid, v) VALUES (%s, %s), (%s, %s), (%s, %s)",
                (a.keys + 1, "x", a.keys + 2, "x", 1, "dup"),
            )
            errors.append("psycopg split INSERT of a duplicate key succeeded")
        except psycopg.errors.UniqueViolation:
            pass
        for k in range(half + 9, a.keys + 1):
            conn.execute("INSERT INTO accounts (aid, v) VALUES (%s, %s)", (k, f"v{k}"))
        for k in range(1, a.keys + 1):
            binary = k % 2 == 0
            row = conn.cursor(binary=binary).execute(
                "SELECT v FROM accounts WHERE aid = %s", (k,)
            ).fetchone()
            if row is None or row[0] != f"v{k}":
                errors.append(f"psycopg read {k} (binary={binary}): {row!r}")
        for k in (4, 5, 6):
            row = conn.execute(
                "SELECT v FROM accounts WHERE aid = %s", (k,), prepare=True
            ).fetchone()
            if row is None or row[0] != f"v{k}":
                errors.append(f"psycopg prepared {k}: {row!r}")
        with conn.transaction():
            row = conn.execute("SELECT v FROM accounts WHERE aid = %s", (7,)).fetchone()
            if row is None or row[0] != "v7":
                errors.append(f"psycopg in a transaction: {row!r}")

    asyncio.run(asyncpg_reads())

    if errors:
        print("\n".join(errors[:20]))
        sys.exit(1)
    print(f"sharded ok: {a.keys} keys written and read through asyncpg and psycopg")


if __name__ == "__main__":
    main()
