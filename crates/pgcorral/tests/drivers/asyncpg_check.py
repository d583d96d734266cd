#!/usr/bin/env python3
"""asyncpg through pgcorral: many connections over a transaction-mode pool of a few servers,
with asyncpg's statement cache on (its default).

asyncpg runs every query with arguments, and every fetch*, as a named prepared statement
(`__asyncpg_stmt_N__`, numbered per connection) and reuses it from its cache in later
transactions, which the pooler runs on whatever server is free. Connections run the same
query texts in different orders, so the same statement name stands for different texts on
different connections. Half the connections have a cache smaller than the number of texts, so
statements are evicted, closed (Close) and prepared again all the time. Also: prepare() with a
name of asyncpg's and with one of ours (the same name, a different text, on every connection),
statements dropped and closed, an enum (whose first use makes asyncpg introspect the type
between the Parse and the Bind of the statement), explicit transactions that commit and roll
back, a cursor, and executemany. Every result is checked.

    asyncpg_check.py [--host H] [--port P] [--user U] [--database D] [--clients N] [--rounds R]

Defaults come from PGHOST, PGPORT, PGUSER and PGDATABASE. Prints one line, `asyncpg ok: ...`,
and exits 0; or prints the errors and exits 1.
"""

import argparse
import asyncio
import os
import sys

try:
    import asyncpg
except ImportError:
    print("asyncpg is not installed: python3 -m pip install asyncpg", file=sys.stderr)
    sys.exit(3)

ITEMS = 10
MOODS = ["sad", "ok", "happy"]


class Mismatch(Exception):
    pass


def check(what, got, want):
    if got != want:
        raise Mismatch(f"{what}: got {got!r}, want {want!r}")


# (name, text, arguments for connection c in round r, how to run it, expected result)
QUERIES = [
    ("add", "SELECT $1::int4 + $2::int4", lambda c, r: (c, r), "val", lambda c, r: c + r),
    (
        "concat",
        "SELECT $1::text || ':' || $2::int8::text",
        lambda c, r: (f"c{c}", r * 1_000_000_007),
        "val",
        lambda c, r: f"c{c}:{r * 1_000_000_007}",
    ),
    (
        "series",
        "SELECT g, g * $2::int4 AS m FROM generate_series(1, $1::int4) AS g",
        lambda c, r: (r % 7 + 1, c),
        "rows",
        lambda c, r: [(g, g * c) for g in range(1, r % 7 + 2)],
    ),
    (
        "row",
        "SELECT $1::float8 * 2 AS f, NOT $2::bool AS b, $3::bytea AS raw",
        lambda c, r: (r + 0.5, c % 2 == 0, bytes([c % 256, r % 256])),
        "row",
        lambda c, r: ((r + 0.5) * 2, c % 2 != 0, bytes([c % 256, r % 256])),
    ),
    (
        "item",
        "SELECT v FROM asyncpg_items WHERE client = $1 AND i = $2",
        lambda c, r: (c, r % ITEMS),
        "val",
        lambda c, r: f"item {c}/{r % ITEMS}",
    ),
    (
        "enum",
        "SELECT $1::asyncpg_mood",
        lambda c, r: (MOODS[(c + r) % 3],),
        "val",
        lambda c, r: MOODS[(c + r) % 3],
    ),
    (
        "array",
        "SELECT $1::int4[] || $2::int4",
        lambda c, r: ([c, r], c * r),
        "val",
        lambda c, r: [c, r, c * r],
    ),
    ("pid", "SELECT pg_backend_pid()", lambda c, r: (), "pid", None),
]


class Rollback(Exception):
    pass


async def run_query(conn, kind, text, qargs):
    if kind in ("val", "pid"):
        return await conn.fetchval(text, *qargs)
    if kind == "rows":
        return [tuple(rec) for rec in await conn.fetch(text, *qargs)]
    rec = await conn.fetchrow(text, *qargs)
    return tuple(rec) if rec is not None else None


async def client(a, c, stats):
    """One connection's whole run; raises on the first error or mismatch."""
    small_cache = c % 2 == 1
    conn = await asyncpg.connect(
        host=a.host,
        port=a.port,
        user=a.user,
        database=a.database,
        ssl=False,
        timeout=30,
        statement_cache_size=4 if small_cache else 100,
    )
    pids = set()
    counter = 0
    where = "connected"
    try:
        # Prepared once, used every round, on whatever server the round gets.
        where = "prepare mul"
        mul = await conn.prepare("SELECT $1::int4 * 3 + $2::int4")
        # The same name on every connection, a different text on each.
        where = "prepare mine"
        mine = await conn.prepare(f"SELECT $1::int4 * 1000 + {c}", name="mine")
        order = QUERIES[c % len(QUERIES) :] + QUERIES[: c % len(QUERIES)]
        for r in range(a.rounds):
            for name, text, qargs, kind, want in order:
                where = f"round {r} {name}"
                got = await run_query(conn, kind, text, qargs(c, r))
                stats["queries"] += 1
                if kind == "pid":
                    pids.add(got)
                else:
                    check(where, got, want(c, r))

            where = f"round {r} prepared mul"
            check(where, await mul.fetchval(r, c), r * 3 + c)
            where = f"round {r} prepared mine"
            check(where, await mine.fetchval(r), r * 1000 + c)
            # A statement of its own each round, dropped at once: asyncpg closes it (Close)
            # before it prepares the next new statement.
            where = f"round {r} throwaway"
            tmp = await conn.prepare("SELECT $1::int4 - 1")
            check(where, await tmp.fetchval(r), r - 1)
            del tmp
            stats["queries"] += 3

            if r % 3 == 0:
                where = f"round {r} transaction"
                async with conn.transaction():
                    n = await conn.fetchval(
                        "UPDATE asyncpg_counters SET n = n + 1 WHERE client = $1 RETURNING n", c
                    )
                    check(where + " update", n, counter + 1)
                    check(
                        where + " read back",
                        await conn.fetchval("SELECT n FROM asyncpg_counters WHERE client = $1", c),
                        counter + 1,
                    )
                    check(where + " add", await conn.fetchval("SELECT $1::int4 + $2::int4", r, c), r + c)
                    pids.add(await conn.fetchval("SELECT pg_backend_pid()"))
                counter += 1
                stats["queries"] += 4
            elif r % 3 == 1:
                where = f"round {r} rollback"
                try:
                    async with conn.transaction():
                        n = await conn.fetchval(
                            "UPDATE asyncpg_counters SET n = n + 1 WHERE client = $1 RETURNING n", c
                        )
                        check(where + " update", n, counter + 1)
                        raise Rollback()
                except Rollback:
                    pass
                check(
                    where + " after",
                    await conn.fetchval("SELECT n FROM asyncpg_counters WHERE client = $1", c),
                    counter,
                )
                stats["queries"] += 2
            if r % 5 == 2:
                where = f"round {r} cursor"
                async with conn.transaction():
                    total = 0
                    async for rec in conn.cursor(
                        "SELECT g FROM generate_series(1, $1::int4) AS g", 50 + r, prefetch=7
                    ):
                        total += rec[0]
                check(where, total, (50 + r) * (51 + r) // 2)
                stats["queries"] += 1
            if r % 4 == 3:
                where = f"round {r} executemany"
                await conn.executemany(
                    "INSERT INTO asyncpg_log (client, round, k) VALUES ($1, $2, $3)",
                    [(c, r, k) for k in range(5)],
                )
                check(
                    where,
                    await conn.fetchval(
                        "SELECT count(*) FROM asyncpg_log WHERE client = $1 AND round = $2", c, r
                    ),
                    5,
                )
                stats["queries"] += 6
        where = "end"
        check(
            "final counter",
            await conn.fetchval("SELECT n FROM asyncpg_counters WHERE client = $1", c),
            counter,
        )
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise RuntimeError(f"connection {c}, {where}: {type(e).__name__}: {first}") from e
    finally:
        await conn.close()
    stats["pids"] |= pids
    if len(pids) > 1:
        stats["moved"] += 1


SETUP = """
DROP TABLE IF EXISTS asyncpg_items, asyncpg_counters, asyncpg_log;
DROP TYPE IF EXISTS asyncpg_mood;
CREATE TYPE asyncpg_mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE asyncpg_items (client int, i int, v text NOT NULL, PRIMARY KEY (client, i));
INSERT INTO asyncpg_items
  SELECT c, i, format('item %s/%s', c, i) FROM generate_series(0, {last}) c, generate_series(0, {items}) i;
CREATE TABLE asyncpg_counters (client int PRIMARY KEY, n int NOT NULL);
INSERT INTO asyncpg_counters SELECT c, 0 FROM generate_series(0, {last}) c;
CREATE TABLE asyncpg_log (client int, round int, k int);
"""


async def main(a):
    setup = await asyncpg.connect(
        host=a.host, port=a.port, user=a.user, database=a.database, ssl=False, timeout=30
    )
    try:
        await setup.execute(SETUP.format(last=a.clients - 1, items=ITEMS - 1))
    finally:
        await setup.close()
    stats = {"queries": 0, "pids": set(), "moved": 0}
    results = await asyncio.gather(*(client(a, c, stats) for c in range(a.clients)), return_exceptions=True)
    errors = [str(r) for r in results if isinstance(r, BaseException)]
    return stats, errors


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


if __name__ == "__main__":
    args = parse_args()
    try:
        stats, errors = asyncio.run(asyncio.wait_for(main(args), args.timeout))
    except asyncio.TimeoutError:
        print(f"asyncpg FAILED: not done after {args.timeout} s", file=sys.stderr)
        sys.exit(1)
    if errors:
        print(f"asyncpg FAILED: {len(errors)} of {args.clients} connections failed", file=sys.stderr)
        for e in errors[:10]:
            print(f"  {e}", file=sys.stderr)
        sys.exit(1)
    print(
        f"asyncpg ok: {args.clients} connections, {args.rounds} rounds, {stats['queries']} queries checked, "
        f"{len(stats['pids'])} server backends seen, {stats['moved']}/{args.clients} connections on more than one"
    )
