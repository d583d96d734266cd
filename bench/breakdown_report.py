"""The report of bench/breakdown.sh: medians of its rows per protocol and client count, the ratios
of pgcorral to PgBouncer, and the floor (the relay).

usage: breakdown_report.py ROWS REV BOUNCER_VERSION T REPS POOL_SIZE SERVER_HOP WORKERS
"""

import statistics
import sys
from collections import defaultdict

COLS = ["tps", "user", "sys", "cpu", "sysc", "recv", "send", "wait", "uring", "futex", "csw",
        "wake", "hand"]


def main():
    rows_path, rev, bouncer, t, reps, pool, hop, workers = sys.argv[1:]
    cells = defaultdict(list)
    for line in open(rows_path):
        f = line.split()
        if len(f) != 3 + len(COLS):
            continue
        cells[(f[1], int(f[2]), f[0])].append([float(x) for x in f[3:]])
    med = {k: [statistics.median(c) for c in zip(*v)] for k, v in cells.items()}
    protos = [p for p in ("simple", "extended", "prepared") if any(k[0] == p for k in med)]
    print("# Where a pooler's CPU goes per transaction, in steady state\n")
    workers = "one per core" if workers == "0" else workers
    print(f"`bench/breakdown.sh`: pgcorral {rev} (workers: {workers}), PgBouncer {bouncer}, "
          f"pool {pool}, "
          f"{t} s measured per cell after the warm-up, {reps} repetition(s) (medians); "
          f"`pgbench -n -S -j 2` over TCP, the server hop over {hop}. Per transaction: µs of the process's CPU (user, sys, both), "
          "system calls (all; recv, send, epoll wait, io_uring_enter, futex), context switches, "
          "wake-ups of its threads (by anyone) and hand-offs (a thread of it waking another). "
          "`relay` is the floor: one thread moving bytes between each client and a server "
          "connection of its own (bench/floor/relay.c). PgBouncer 1.18 has no prepared "
          "statements in transaction mode: `pgbouncer-s` and `pgcorral-s` are session mode, "
          "pool = clients.\n")
    for proto in protos:
        print(f"## {proto}\n")
        print("| clients | target | " + " | ".join(COLS) + " |")
        print("|---|---|" + "---:|" * len(COLS))
        clients = sorted({k[1] for k in med if k[0] == proto})
        for c in clients:
            for name in ("direct", "relay", "pgbouncer", "pgbouncer-s", "pgcorral", "pgcorral-s"):
                v = med.get((proto, c, name))
                if v is None:
                    continue
                shown = [f"{v[0]:.0f}"] + [f"{x:.2f}" for x in v[1:]]
                if name == "direct":
                    shown = [shown[0]] + ["–"] * (len(COLS) - 1)
                print(f"| {c} | {name} | " + " | ".join(shown) + " |")
        print()
        print("Ratios, pgcorral ÷ PgBouncer (CPU per transaction; tps) and pgcorral's CPU above "
              "the floor's:\n")
        print("| clients | CPU/tx | user/tx | sys/tx | tps | CPU/tx − floor (µs) |")
        print("|---|---:|---:|---:|---:|---:|")
        for c in clients:
            b = med.get((proto, c, "pgbouncer")) or med.get((proto, c, "pgbouncer-s"))
            o = med.get((proto, c, "pgcorral"))
            f = med.get((proto, c, "relay"))
            if not b or not o:
                continue
            r = lambda i: f"{o[i] / b[i]:.2f}" if b[i] else "–"
            above = f"{o[3] - f[3]:.2f}" if f else "–"
            print(f"| {c} | {r(3)} | {r(1)} | {r(2)} | {r(0)} | {above} |")
        print()


if __name__ == "__main__":
    main()
