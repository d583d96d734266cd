"""The report of bench/breakdown.sh: medians of its rows per protocol and client count, the ratios
of pgcorral to PgBouncer, and the floors (the epoll relay, and the same relay on io_uring), with
the study variants of those two (relay-batch, uring-nodefer) beside them when they ran.

usage: breakdown_report.py ROWS REV BOUNCER_VERSION T REPS POOL_SIZE SERVER_HOP WORKERS
"""

import statistics
import sys
from collections import defaultdict

# Not floors: variants of the two, for a study of where uring's saving comes from (run only when
# TARGETS names them). Shown in the tables and beside the floors, never in the ratio columns.
STUDY = {
    "relay-batch": "`relay-batch` is relay.c built with -DBATCH_SENDS, pgcorral's kernel pattern: "
    "epoll and one recv per read as `relay`, but each loop turn's sends handed to the kernel "
    "together, in one io_uring submission (IORING_OP_SEND, MSG_DONTWAIT) when there are two or "
    "more, a plain send when there is one.",
    "uring-nodefer": "`uring-nodefer` is uring.c built with -DNO_DEFER: the same ring without "
    "SINGLE_ISSUER | DEFER_TASKRUN, so the kernel runs the ring's task work whenever it can "
    "rather than inside the loop's io_uring_enter.",
}
ORDER = ("relay", "relay-batch", "uring-nodefer", "uring")

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
          "connection of its own (bench/floor/relay.c; epoll, recv, send). `uring` is the same "
          "relay with all its socket I/O on one io_uring (bench/floor/uring.c: multishot accept "
          "and recv into provided buffers, sends from them, one io_uring_enter per loop turn and "
          "no other system call per message): the floor of a proxy that does its I/O through a "
          "ring. PgBouncer 1.18 has no prepared "
          "statements in transaction mode: `pgbouncer-s` and `pgcorral-s` are session mode, "
          "pool = clients." + "".join(" " + STUDY[n] for n in STUDY
                                      if any(k[2] == n for k in med)) + "\n")
    for proto in protos:
        print(f"## {proto}\n")
        print("| clients | target | " + " | ".join(COLS) + " |")
        print("|---|---|" + "---:|" * len(COLS))
        clients = sorted({k[1] for k in med if k[0] == proto})
        for c in clients:
            for name in ("direct", *ORDER, "pgbouncer", "pgbouncer-s", "pgcorral", "pgcorral-s"):
                v = med.get((proto, c, name))
                if v is None:
                    continue
                shown = [f"{v[0]:.0f}"] + [f"{x:.2f}" for x in v[1:]]
                if name == "direct":
                    shown = [shown[0]] + ["–"] * (len(COLS) - 1)
                print(f"| {c} | {name} | " + " | ".join(shown) + " |")
        print()
        if any((proto, c, "relay") in med and (proto, c, "uring") in med for c in clients):
            print("The two floors, `uring` beside `relay` (per transaction: µs of CPU, system "
                  "calls):\n")
            print("| clients | CPU relay | CPU uring | uring − relay (µs) | uring ÷ relay "
                  "| sysc relay | sysc uring |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for c in clients:
                f, u = med.get((proto, c, "relay")), med.get((proto, c, "uring"))
                if not f or not u:
                    continue
                ratio = f"{u[3] / f[3]:.2f}" if f[3] else "–"
                print(f"| {c} | {f[3]:.2f} | {u[3]:.2f} | {u[3] - f[3]:.2f} | {ratio} "
                      f"| {f[4]:.2f} | {u[4]:.2f} |")
            print()
        study = [n for n in ORDER if any((proto, c, n) in med for c in clients)]
        if any(n in STUDY for n in study):
            print("The relays side by side (per transaction: µs of CPU / system calls):\n")
            print("| clients | " + " | ".join(f"`{n}`" for n in study) + " |")
            print("|---|" + "---:|" * len(study))
            for c in clients:
                v = [med.get((proto, c, n)) for n in study]
                print(f"| {c} | " + " | ".join(f"{x[3]:.2f} / {x[4]:.2f}" if x else "–" for x in v)
                      + " |")
            print()
        rows = []
        for c in clients:
            b = med.get((proto, c, "pgbouncer")) or med.get((proto, c, "pgbouncer-s"))
            o = med.get((proto, c, "pgcorral"))
            f = med.get((proto, c, "relay"))
            u = med.get((proto, c, "uring"))
            if not b or not o:
                continue
            r = lambda i: f"{o[i] / b[i]:.2f}" if b[i] else "–"
            above = f"{o[3] - f[3]:.2f}" if f else "–"
            above_u = f"{o[3] - u[3]:.2f}" if u else "–"
            # What the floors themselves spend, as a share of PgBouncer's CPU: no pooler that
            # moves its bytes the same way can come in below it.
            floor_b = lambda x: f"{x[3] / b[3]:.2f}" if x and b[3] else "–"
            rows.append(f"| {c} | {r(3)} | {r(1)} | {r(2)} | {r(0)} | {above} | {above_u} "
                        f"| {floor_b(f)} | {floor_b(u)} |")
        if rows:
            print("Ratios, pgcorral ÷ PgBouncer (CPU per transaction; tps), pgcorral's CPU "
                  "above the floors' (`relay`, and `uring` when it ran), and each floor's own CPU "
                  "÷ PgBouncer's:\n")
            print("| clients | CPU/tx | user/tx | sys/tx | tps | CPU/tx − floor (µs) "
                  "| CPU/tx − uring (µs) | relay ÷ PgBouncer | uring ÷ PgBouncer |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            print("\n".join(rows))
            print()


if __name__ == "__main__":
    main()
