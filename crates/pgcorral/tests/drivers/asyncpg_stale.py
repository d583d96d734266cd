#!/usr/bin/env python3
"""asyncpg, two connections, a schema change between their prepares, and SQL EXECUTE of an
SQL-prepared statement (which asyncpg sends as a Parse): prints what each step returned or
raised, one line each, so that a run directly against PostgreSQL and one through pgcorral can
be compared line by line.

    asyncpg_stale.py --port P [--host H] [--user U] [--database D]
"""

import argparse
import asyncio


async def step(out, what, coro):
    try:
        out.append(f"{what}: {await coro!r}")
    except Exception as e:  # the class and SQLSTATE are what is compared
        out.append(f"{what}: {type(e).__name__} {getattr(e, 'sqlstate', '')}")


async def main(args):
    import asyncpg

    connect = lambda: asyncpg.connect(  # noqa: E731
        host=args.host, port=args.port, user=args.user, database=args.database
    )
    one, two = await connect(), await connect()
    out = []
    await one.execute("DROP TABLE IF EXISTS r; CREATE TABLE r(v numeric)")
    await step(out, "numeric", one.execute("INSERT INTO r VALUES ($1)", 1.5))
    await one.execute("DROP TABLE r; CREATE TABLE r(v int)")
    # A fresh prepare on the other connection: its parameter is an int now.
    await step(out, "int", two.execute("INSERT INTO r VALUES ($1)", 1.5))
    await step(out, "int 2", two.execute("INSERT INTO r VALUES ($1)", 2))
    await step(out, "rows", two.fetch("SELECT v FROM r ORDER BY v"))
    await step(out, "prepare", one.execute("PREPARE p(int) AS SELECT $1 * 2"))
    await step(out, "execute", one.fetchval("EXECUTE p(21)"))
    await step(out, "execute again", one.fetchval("EXECUTE p(4)"))
    await step(out, "not two's", two.fetchval("EXECUTE p(1)"))
    await one.execute("DROP TABLE r")
    await one.close()
    await two.close()
    for line in out:
        print(line)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", default="postgres")
    p.add_argument("--database", default="postgres")
    asyncio.run(main(p.parse_args()))
