#!/usr/bin/env python3
"""LISTEN through the pooler with asyncpg's add_listener or psycopg's notifies().

    python3 listeners.py --driver asyncpg|psycopg --host H --port P [--clients N]

N clients listen on channel a or b (alternately) with the driver's own API; one more client
sends 20 notifications on each channel. Every listener must get exactly its channel's
payloads, in order. Prints `<driver> listeners ok: N clients, 40 notifications` and exits 0;
otherwise what went wrong, exit 1.
"""
import argparse
import asyncio
import sys

p = argparse.ArgumentParser()
p.add_argument("--driver", required=True)
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, default=6432)
p.add_argument("--clients", type=int, default=10)
args = p.parse_args()
DSN = f"postgresql://postgres@{args.host}:{args.port}/postgres"
SENT = {ch: [f"{ch}{i}" for i in range(20)] for ch in ("a", "b")}


async def with_asyncpg():
    import asyncpg

    got, conns = [], []
    for i in range(args.clients):
        ch = "ab"[i % 2]
        c = await asyncpg.connect(DSN, statement_cache_size=0)
        q = asyncio.Queue()
        await c.add_listener(ch, lambda _c, _pid, _ch, payload, q=q: q.put_nowait(payload))
        conns.append(c)
        got.append((ch, q))
    sender = await asyncpg.connect(DSN, statement_cache_size=0)
    for i in range(20):
        for ch in ("a", "b"):
            await sender.execute(f"NOTIFY {ch}, '{ch}{i}'")
    for ch, q in got:
        seen = [await asyncio.wait_for(q.get(), 10) for _ in range(20)]
        if seen != SENT[ch] or not q.empty():
            sys.exit(f"asyncpg listener on {ch}: {seen} (+{q.qsize()} more)")
    for c in conns + [sender]:
        await c.close()


def with_psycopg():
    import psycopg

    conns = []
    for i in range(args.clients):
        ch = "ab"[i % 2]
        c = psycopg.connect(DSN, autocommit=True)
        c.execute(f"LISTEN {ch}")
        conns.append((ch, c))
    sender = psycopg.connect(DSN, autocommit=True)
    for i in range(20):
        for ch in ("a", "b"):
            sender.execute(f"NOTIFY {ch}, '{ch}{i}'")
    for ch, c in conns:
        seen = [n.payload for n in c.notifies(timeout=10, stop_after=20)]
        if seen != SENT[ch]:
            sys.exit(f"psycopg listener on {ch}: {seen}")
        extra = [n.payload for n in c.notifies(timeout=0.2)]
        if extra:
            sys.exit(f"psycopg listener on {ch} got more: {extra}")
        c.close()
    sender.close()


if args.driver == "asyncpg":
    asyncio.run(with_asyncpg())
else:
    with_psycopg()
print(f"{args.driver} listeners ok: {args.clients} clients, 40 notifications")
