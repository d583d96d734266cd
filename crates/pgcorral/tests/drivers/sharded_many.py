#!/usr/bin/env python3
"""psycopg's and asyncpg's `executemany` through a sharded pgcorral database: one request of
many Bind/Execute pairs whose rows are on several shards.

The database `app` has a sharded table accounts(aid int4 key, v text). Each case writes
`--rows` rows with its own range of keys: psycopg in autocommit mode, psycopg in a transaction
(its default), asyncpg outside a transaction, asyncpg inside one; then a psycopg executemany
whose last row fails (a duplicate key) must leave none of its rows behind, outside a
transaction and inside one (where the next statement is refused until ROLLBACK). The case
`keyless` runs executemany of UPDATEs that name no key (each on every shard, row counts
summed) through psycopg, and through asyncpg in a transaction; the rows it changes are counted
back. The case
`reads` (last) reads the rows back across shards through both drivers' extended protocol
(asyncpg in binary, plain and prepared, in and out of a transaction; psycopg with parameters)
and checks the counts, sums and order a single server would give. The test that runs
this counts the rows on the shards (every case's, none of the failing one's) and checks that
every key is where PostgreSQL's hash partitioning puts it.

    sharded_many.py --port P [--host H] [--rows N] [--cases a,b,...]

Prints `many ok: ...` and exits 0; or prints the errors and exits 1.
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

INSERT_PG = "INSERT INTO accounts (aid, v) VALUES (%s, %s)"
INSERT_A = "INSERT INTO accounts (aid, v) VALUES ($1, $2)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument(
        "--cases",
        default="psycopg_autocommit,psycopg_transaction,asyncpg,asyncpg_transaction,keyless,failing,failing_transaction,reads",
    )
    a = ap.parse_args()
    dsn = f"host={a.host} port={a.port} user=postgres dbname=app sslmode=disable"
    cases = a.cases.split(",")
    errors = []
    done = []

    def keys(case):
        base = (cases.index(case) + 1) * 100000
        return [(base + k, f"v{k}") for k in range(a.rows)]

    for case in cases:
        try:
            rows = keys(case)
            if case == "psycopg_autocommit":
                with psycopg.connect(dsn, autocommit=True) as c:
                    c.cursor().executemany(INSERT_PG, rows)
            elif case == "psycopg_transaction":
                with psycopg.connect(dsn) as c:
                    c.cursor().executemany(INSERT_PG, rows)
                    c.commit()
            elif case in ("asyncpg", "asyncpg_transaction"):

                async def run():
                    c = await asyncpg.connect(
                        host=a.host, port=a.port, user="postgres", database="app", ssl=False
                    )
                    try:
                        if case == "asyncpg_transaction":
                            async with c.transaction():
                                await c.executemany(INSERT_A, rows)
                        else:
                            await c.executemany(INSERT_A, rows)
                    finally:
                        await c.close()

                asyncio.run(run())
            elif case == "keyless":
                # Every writing case wrote v0, v1, ... once: each UPDATE changes one row per
                # writing case, on whichever shards they are.
                writers = sum(1 for c in cases if writes(c))
                with psycopg.connect(dsn, autocommit=True) as c:
                    cur = c.cursor()
                    cur.executemany(
                        "UPDATE accounts SET v = %s WHERE v = %s",
                        [(f"k{k}", f"v{k}") for k in range(20)],
                    )
                    if cur.rowcount != 20 * writers:
                        errors.append(f"keyless: psycopg rowcount {cur.rowcount}, want {20 * writers}")

                async def keyless():
                    c = await asyncpg.connect(
                        host=a.host, port=a.port, user="postgres", database="app", ssl=False
                    )
                    try:
                        async with c.transaction():
                            await c.executemany(
                                "UPDATE accounts SET v = $1 WHERE v = $2",
                                [(f"k{k}", f"v{k}") for k in range(20, 40)],
                            )
                        return await c.fetchval("SELECT count(*) FROM accounts WHERE v LIKE 'k%'")
                    finally:
                        await c.close()

                got = asyncio.run(keyless())
                if got != 40 * writers:
                    errors.append(f"keyless: {got} rows changed, want {40 * writers}")
            elif case == "failing":
                # The last row's key is the first's: nothing of the request is kept.
                bad = rows[:50] + [rows[0]]
                try:
                    with psycopg.connect(dsn, autocommit=True) as c:
                        c.cursor().executemany(INSERT_PG, bad)
                    errors.append("failing: the duplicate key was not refused")
                except psycopg.errors.UniqueViolation:
                    pass
            elif case == "failing_transaction":
                # In a transaction: the error fails it on every shard; nothing is kept.
                bad = rows[:50] + [rows[0]]
                with psycopg.connect(dsn) as c:
                    try:
                        c.cursor().executemany(INSERT_PG, bad)
                        errors.append("failing_transaction: the duplicate key was not refused")
                    except psycopg.errors.UniqueViolation:
                        pass
                    try:
                        c.execute(INSERT_PG, (rows[-1][0], "after"))
                        errors.append("failing_transaction: a statement after the error ran")
                    except psycopg.errors.InFailedSqlTransaction:
                        pass
                    c.rollback()
            elif case == "reads":
                written = sorted(k for c in cases if writes(c) for k, _ in keys(c))
                errors.extend(f"reads: {e}" for e in reads(a, dsn, written))
            done.append(case)
        except Exception as e:
            errors.append(f"{case}: {type(e).__name__}: {e}")
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"many ok: {', '.join(done)}, {a.rows} rows each")


def writes(case):
    """Whether a case leaves rows of its own keys."""
    return case not in ("reads", "keyless") and not case.startswith("failing")


def reads(a, dsn, written):
    """Reads across shards through both drivers; the differences from `written` (the keys the
    writing cases left, sorted)."""
    errors = []
    n, first, total = len(written), written[:10], sum(written)

    def check(what, got, want):
        if got != want:
            errors.append(f"{what}: {got!r}, want {want!r}")

    async def run():
        c = await asyncpg.connect(host=a.host, port=a.port, user="postgres", database="app", ssl=False)
        try:
            check("asyncpg count", await c.fetchval("SELECT count(*) FROM accounts"), n)
            rows = await c.fetch("SELECT aid FROM accounts ORDER BY aid LIMIT 10")
            check("asyncpg order by", [r["aid"] for r in rows], first)
            stmt = await c.prepare("SELECT count(*), sum(aid) FROM accounts WHERE aid >= $1")
            for low in (0, written[n // 2]):
                want = [k for k in written if k >= low]
                check(f"asyncpg prepared >= {low}", tuple(await stmt.fetchrow(low)), (len(want), sum(want)))
            async with c.transaction():
                await c.execute("INSERT INTO accounts (aid, v) VALUES ($1, 'tx')", 7)
                check("asyncpg count in a transaction", await c.fetchval("SELECT count(*) FROM accounts"), n + 1)
                raise Rollback()
        except Rollback:
            pass
        finally:
            await c.close()

    asyncio.run(run())
    with psycopg.connect(dsn) as c:
        got = c.execute(
            "SELECT count(*), sum(aid), min(aid), max(aid) FROM accounts WHERE aid > %s", (0,)
        ).fetchone()
        check("psycopg aggregates", got, (n, total, written[0], written[-1]))
        got = [r[0] for r in c.execute("SELECT aid FROM accounts ORDER BY aid DESC LIMIT 3")]
        check("psycopg order by", got, written[::-1][:3])
        c.rollback()
    return errors


class Rollback(Exception):
    """Leaves an asyncpg transaction by rolling it back."""


if __name__ == "__main__":
    main()
