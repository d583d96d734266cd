#!/usr/bin/env python3
"""Parsing, aggregation, report and chart for bench/run.sh (see bench/README.md).

Subcommands (all called by run.sh):

  sample  write "epoch_µs utime+stime_ticks" of a process every 0.1 s until stopped
  cell    parse one pgbench run (its output and its per-transaction logs) and print one JSON
          line: tps, transactions, failures, errors, mean and p99 latency, pooler CPU per tx
  report  read the JSON lines of every run and write the markdown report and the PNG chart
"""

import argparse
import bisect
import glob
import json
import math
import operator
import os
import platform
import re
import statistics
import signal
import subprocess
import sys
import time
from collections import defaultdict

TARGETS = ["direct", "pgbouncer", "pgcorral"]
LABELS = {"direct": "PostgreSQL direct", "pgbouncer": "PgBouncer", "pgcorral": "pgcorral"}
SHORT = {"direct": "direct", "pgbouncer": "PgBouncer", "pgcorral": "pgcorral"}
PARTS = [
    ("simple", "pgbench -S, `--protocol simple`, transaction mode"),
    ("extended", "pgbench -S, `--protocol extended`, transaction mode"),
    ("prepared_tx", "pgbench -S, `--protocol prepared`, transaction mode"),
    ("prepared", "pgbench -S, `--protocol prepared`, session mode (database `bench_session`)"),
]


# ----------------------------------------------------------------------------------------------
# cell


def parse_pgbench_output(text):
    """The numbers and the error lines of one pgbench run's stdout+stderr (PostgreSQL 15)."""
    r = {}

    def num(pattern, conv=float):
        m = re.search(pattern, text, re.M)
        return conv(m.group(1)) if m else None

    r["transactions"] = num(r"^number of transactions actually processed: (\d+)", int)
    r["failed"] = num(r"^number of failed transactions: (\d+)", int)
    r["tps"] = num(r"^tps = ([0-9.]+)")
    r["pgbench_latency_avg_ms"] = num(r"^latency average = ([0-9.]+) ms")
    r["initial_connection_ms"] = num(r"^initial connection time = ([0-9.]+) ms")
    r["avg_connection_ms"] = num(r"^average connection time = ([0-9.]+) ms")
    # Anything that reports a problem. The summary line "number of failed transactions" is
    # counted above, not an error line.
    errors = []
    for line in text.splitlines():
        if line.startswith("number of failed transactions"):
            continue
        if re.search(r"error|fatal|FATAL|ERROR|WARNING|abort|could not|timeout|server closed", line, re.I):
            errors.append(line.strip())
    r["error_lines"] = len(errors)
    # Distinct messages, numbers (client ids, pids, ports) folded so 1024 copies of one error
    # count as one; the first occurrence of each is kept verbatim.
    seen, distinct = set(), []
    for e in errors:
        key = re.sub(r"\d+", "N", e)
        if key not in seen:
            seen.add(key)
            distinct.append(e)
    r["errors"] = distinct[:10]
    return r


def read_latencies(logdir):
    """Per-transaction latencies and completion times (µs since the epoch) from pgbench --log
    files (one per thread): client_id transaction_no time script_no time_epoch time_us."""
    lat, done, failed_lines = [], [], 0
    for path in sorted(glob.glob(os.path.join(logdir, "tx.*"))):
        with open(path, "rb") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 6:
                    continue
                try:
                    lat.append(int(parts[2]))
                except ValueError:  # "failed" or "skipped"
                    failed_lines += 1
                    continue
                done.append(int(parts[4]) * 1_000_000 + int(parts[5]))
    return lat, done, failed_lines


def proc_cpu_ticks(pid):
    """(utime + stime, utime) of the process, all threads, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15
    return utime + stime, utime


def cmd_sample(a):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(a.out, "w") as out:
        while True:
            try:
                ticks, user = proc_cpu_ticks(a.pid)
            except (OSError, IndexError, ValueError):
                return
            out.write(f"{time.time_ns() // 1000} {ticks} {user}\n")
            out.flush()
            time.sleep(a.interval)


def steady_cpu(samples_path, done, clk_tck):
    """CPU µs per transaction between the first and the last transaction of the run: from the
    first sample after the first completion (all clients logged in by then: pgbench starts
    transactions only once every client is connected) to the last sample before the last
    completion (before the clients log out), divided by the transactions completed in between.
    Returns (µs/tx, the user time of it in µs/tx, the window in s)."""
    if not samples_path or not done or not os.path.exists(samples_path):
        return None, None, None
    samples = []
    with open(samples_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                samples.append((int(parts[0]), int(parts[1]), int(parts[2])))
    done = sorted(done)
    inside = [s for s in samples if done[0] <= s[0] <= done[-1]]
    if len(inside) < 2:
        return None, None, None
    (t0, c0, u0), (t1, c1, u1) = inside[0], inside[-1]
    n = bisect.bisect_right(done, t1) - bisect.bisect_right(done, t0)
    if n <= 0:
        return None, None, None
    per_tick = 1e6 / clk_tck / n
    return (c1 - c0) * per_tick, (u1 - u0) * per_tick, (t1 - t0) / 1e6


def percentile_nearest_rank(sorted_values, p):
    if not sorted_values:
        return None
    k = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[k - 1]


def cmd_cell(a):
    with open(a.out, errors="replace") as f:
        text = f.read()
    r = {"part": a.part, "clients": a.clients, "target": a.target, "rep": a.rep, "rc": a.rc}
    r.update(parse_pgbench_output(text))
    lat, done, failed_lines = read_latencies(a.logs) if a.logs else ([], [], 0)
    lat.sort()
    r["duration_s"] = a.duration
    # Seconds of benchmarking: -T less the initial logins (the storm has none up front).
    r["measured_s"] = (r["transactions"] / r["tps"]) if r["tps"] and r["transactions"] else 0.0
    if r["transactions"] == 0:
        r["errors"].append(f"0 transactions processed: the clients' logins took all of -T {a.duration}")
        r["error_lines"] += 1
    elif a.bench_t and r["measured_s"] < 0.8 * a.bench_t:
        r["errors"].append(
            f"only {r['measured_s']:.1f} s measured of BENCH_T={a.bench_t} "
            f"(-T {a.duration}, logins took {(r['initial_connection_ms'] or 0) / 1000:.1f} s): raise BENCH_LOGIN_MS"
        )
        r["error_lines"] += 1
    r["logged_transactions"] = len(lat)
    r["logged_failed"] = failed_lines
    r["lat_mean_ms"] = (sum(lat) / len(lat) / 1000.0) if lat else None
    p99 = percentile_nearest_rank(lat, 99)
    r["lat_p99_ms"] = p99 / 1000.0 if p99 is not None else None
    r["out"] = os.path.basename(a.out)
    if a.cpu_before is not None and a.cpu_after is not None:
        ticks = a.cpu_after - a.cpu_before
        r["cpu_ticks"] = ticks
        tx = r["transactions"]
        r["cpu_us_per_tx"] = (ticks / a.clk_tck * 1e6 / tx) if tx else None
    else:
        r["cpu_ticks"] = None
        r["cpu_us_per_tx"] = None
    total, user, r["steady_window_s"] = steady_cpu(a.cpu_samples, done, a.clk_tck)
    r["cpu_us_per_tx_steady"], r["cpu_user_us_per_tx_steady"] = total, user
    r["cpu_sys_us_per_tx_steady"] = total - user if total is not None else None
    print(json.dumps(r))
    # One line for the console.
    fmt = lambda v, f: (f % v) if v is not None else "-"  # noqa: E731
    msg = (
        f"  {a.part:11} c={a.clients:<5} {a.target:9} rep {a.rep}: "
        f"tps {fmt(r['tps'], '%.0f')}, mean {fmt(r['lat_mean_ms'], '%.3f')} ms, "
        f"p99 {fmt(r['lat_p99_ms'], '%.3f')} ms, cpu/tx {fmt(r['cpu_us_per_tx'], '%.1f')} µs "
        f"(steady {fmt(r['cpu_us_per_tx_steady'], '%.1f')} µs)"
    )
    if a.rc != 0 or r["failed"] or r["error_lines"]:
        msg += f"  [rc {a.rc}, failed {r['failed']}, {r['error_lines']} error line(s)]"
        for e in r["errors"][:3]:
            msg += f"\n      {e}"
    print(msg, file=sys.stderr)


# ----------------------------------------------------------------------------------------------
# report


def load_jsonl(path):
    rows = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    return rows


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def f_num(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def f_lat(v):
    if v is None:
        return "–"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def f_ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def f_times(v):
    return f"{v:.2f}×"


def run_cmd(args):
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip()
    except Exception as e:  # noqa: BLE001
        return f"({e})"


def machine_info(a):
    info = []
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    osname = platform.system()
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    info.append(("CPUs (nproc)", run_cmd(["nproc"])))
    info.append(("CPU model", cpu))
    info.append(("Memory", mem))
    info.append(("OS", osname))
    info.append(("Kernel", platform.release()))
    info.append(("PostgreSQL", run_cmd([os.path.join(a.pg_bindir, "postgres"), "--version"])))
    info.append(("pgbench", run_cmd([os.path.join(a.pg_bindir, "pgbench"), "--version"])))
    info.append(("PgBouncer", run_cmd([a.pgbouncer, "--version"]).splitlines()[0]))
    info.append(("pgcorral", f"{run_cmd([a.pgcorral, '--version'])}, git {a.git_rev}, build: {a.pgcorral_build}"))
    info.append(("rustc", run_cmd(["rustc", "--version"])))
    if a.tls_key:
        info.append(
            (
                "TLS libraries",
                f"PostgreSQL, libpq (pgbench) and PgBouncer: system {run_cmd(['openssl', 'version'])}; "
                "pgcorral: rustls (ring)",
            )
        )
    if a.load_start or a.load_end:
        info.append(("Load average (1/5/15 min) at start → end", f"{a.load_start} → {a.load_end}"))
    return info


def aggregate(cells):
    """(part, clients, target) → medians over repetitions, plus the runs themselves."""
    groups = defaultdict(list)
    for c in cells:
        groups[(c["part"], c["clients"], c["target"])].append(c)
    agg = {}
    for key, runs in groups.items():
        done = [r for r in runs if not r.get("skipped")]
        if not done:
            agg[key] = {"skipped": runs[0].get("skipped"), "runs": []}
            continue
        if all(r["rc"] != 0 or r.get("tps") is None for r in done):
            # pgbench failed every time (clients aborted, e.g. PgBouncer without prepared
            # statements in transaction mode): whatever it measured before is no result.
            agg[key] = {"fails": True, "problem": True, "runs": done}
            continue
        agg[key] = {
            "tps": med(r.get("tps") for r in done),
            "lat_mean_ms": med(r.get("lat_mean_ms") for r in done),
            "lat_p99_ms": med(r.get("lat_p99_ms") for r in done),
            "cpu_us_per_tx": med(r.get("cpu_us_per_tx") for r in done),
            "cpu_us_per_tx_steady": med(r.get("cpu_us_per_tx_steady") for r in done),
            "cpu_user_us_per_tx_steady": med(r.get("cpu_user_us_per_tx_steady") for r in done),
            "cpu_sys_us_per_tx_steady": med(r.get("cpu_sys_us_per_tx_steady") for r in done),
            "avg_connection_ms": med(r.get("avg_connection_ms") for r in done),
            "problem": any(
                r["rc"] != 0 or (r.get("failed") or 0) > 0 or r.get("error_lines", 0) > 0
                or r.get("tps") is None
                for r in done
            ),
            "runs": done,
        }
    return agg


def cell_value(agg, part, clients, target, field):
    g = agg.get((part, clients, target))
    if not g or g.get("skipped"):
        return None
    return g.get(field)


def mark(agg, part, clients, target):
    g = agg.get((part, clients, target))
    return " ⚠" if g and g.get("problem") else ""


def tps_cell(agg, part, clients, target):
    g = agg.get((part, clients, target))
    if g is None:
        return "–"
    if g.get("skipped"):
        return "n/a"
    if g.get("fails"):
        return "fails"
    return f_num(g.get("tps")) + mark(agg, part, clients, target)


def triple(agg, part, clients, field):
    vals = []
    for t in TARGETS:
        g = agg.get((part, clients, t))
        if g is None:
            vals.append("–")
        elif g.get("skipped"):
            vals.append("n/a")
        elif g.get("fails"):
            vals.append("fails")
        else:
            vals.append(f_lat(g.get(field)))
    return " / ".join(vals)


def cpu_pair(agg, part, clients, target):
    run = cell_value(agg, part, clients, target, "cpu_us_per_tx")
    steady = cell_value(agg, part, clients, target, "cpu_us_per_tx_steady")
    return f"{f_num(run, 1)} / {f_num(steady, 1)}"


def part_table(agg, part, clients_list):
    lines = [
        "| Clients | TPS direct | TPS PgBouncer | TPS pgcorral | pgcorral / PgBouncer | pgcorral / direct "
        "| Mean latency ms (direct / PgBouncer / pgcorral) | p99 latency ms (direct / PgBouncer / pgcorral) "
        "| CPU µs/tx PgBouncer (run / steady) | CPU µs/tx pgcorral (run / steady) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in clients_list:
        tps = {t: cell_value(agg, part, c, t, "tps") for t in TARGETS}
        lines.append(
            f"| {c} | {tps_cell(agg, part, c, 'direct')} | {tps_cell(agg, part, c, 'pgbouncer')} "
            f"| {tps_cell(agg, part, c, 'pgcorral')} "
            f"| {f_ratio(tps['pgcorral'], tps['pgbouncer'])} | {f_ratio(tps['pgcorral'], tps['direct'])} "
            f"| {triple(agg, part, c, 'lat_mean_ms')} | {triple(agg, part, c, 'lat_p99_ms')} "
            f"| {cpu_pair(agg, part, c, 'pgbouncer')} | {cpu_pair(agg, part, c, 'pgcorral')} |"
        )
    return "\n".join(lines)


def cpu_split_table(agg, parts_present, clients_by_part):
    """The steady CPU per transaction of each pooler split into user time (its own code) and
    system time (the kernel's work on its behalf), per part and client count."""
    lines = [
        "| Part | Clients | PgBouncer user | PgBouncer system | pgcorral user | pgcorral system "
        "| user: pgcorral − PgBouncer | system: pgcorral − PgBouncer |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def split(part, c, t):
        return (
            cell_value(agg, part, c, t, "cpu_user_us_per_tx_steady"),
            cell_value(agg, part, c, t, "cpu_sys_us_per_tx_steady"),
        )

    def diff(a, b):
        return f"{a - b:+.1f}" if a is not None and b is not None else "–"

    for part, _ in PARTS:
        if part not in parts_present:
            continue
        for c in clients_by_part[part]:
            bu, bs = split(part, c, "pgbouncer")
            cu, cs = split(part, c, "pgcorral")
            if bu is None and cu is None:
                continue
            lines.append(
                f"| {part} | {c} | {f_num(bu, 1)} | {f_num(bs, 1)} | {f_num(cu, 1)} | {f_num(cs, 1)} "
                f"| {diff(cu, bu)} | {diff(cs, bs)} |"
            )
    return "\n".join(lines) if len(lines) > 2 else None


def per_rep(agg, part, c, target, field):
    """rep → value of one field, for the runs of a target that gave a result."""
    g = agg.get((part, c, target)) or {}
    return {
        r["rep"]: r.get(field)
        for r in g.get("runs", [])
        if r["rc"] == 0 and r.get(field) is not None
    }


def paired_table(agg, parts_present, clients_by_part):
    """pgcorral against PgBouncer and against direct PostgreSQL within each repetition, where
    the targets ran minutes apart, and the median of those paired figures: a machine that
    speeds up or slows down between repetitions moves all three of a repetition alike, but can
    move the medians of the tables above by more than the difference between the targets."""
    lines = [
        "| Part | Clients | TPS pgcorral ÷ PgBouncer, each repetition | median "
        "| TPS pgcorral ÷ direct, each repetition | median "
        "| steady CPU µs/tx pgcorral − PgBouncer, each repetition | median |",
        "|---|---:|---|---:|---|---:|---|---:|",
    ]

    def series(a, b, op):
        reps = sorted(set(a) & set(b))
        return [op(a[r], b[r]) for r in reps if b[r]]

    def cells(values, fmt):
        if not values:
            return "–", "–"
        return " / ".join(fmt(v) for v in values), fmt(statistics.median(values))

    for part, _ in PARTS:
        if part not in parts_present:
            continue
        for c in clients_by_part[part]:
            tps = {t: per_rep(agg, part, c, t, "tps") for t in TARGETS}
            cpu = {t: per_rep(agg, part, c, t, "cpu_us_per_tx_steady") for t in ("pgbouncer", "pgcorral")}
            if not tps["pgcorral"]:
                continue
            vs_b = cells(series(tps["pgcorral"], tps["pgbouncer"], operator.truediv), f_times)
            vs_d = cells(series(tps["pgcorral"], tps["direct"], operator.truediv), f_times)
            cpu_d = cells(series(cpu["pgcorral"], cpu["pgbouncer"], operator.sub), lambda v: f"{v:+.1f}")
            lines.append(
                f"| {part} | {c} | {vs_b[0]} | {vs_b[1]} | {vs_d[0]} | {vs_d[1]} | {cpu_d[0]} | {cpu_d[1]} |"
            )
    return "\n".join(lines) if len(lines) > 2 else None


def prepared_vs_extended(agg, clients_list):
    """pgcorral's TPS with `--protocol prepared` against `--protocol extended`, both in
    transaction mode, per client count (direct PostgreSQL's ratio beside it for reference), and
    the median of pgcorral's ratios."""
    lines = [
        "| Clients | pgcorral extended TPS | pgcorral prepared TPS | pgcorral prepared / extended "
        "| direct prepared / extended |",
        "|---:|---:|---:|---:|---:|",
    ]
    ratios = []
    for c in clients_list:
        ext = cell_value(agg, "extended", c, "pgcorral", "tps")
        prep = cell_value(agg, "prepared_tx", c, "pgcorral", "tps")
        d_ext = cell_value(agg, "extended", c, "direct", "tps")
        d_prep = cell_value(agg, "prepared_tx", c, "direct", "tps")
        if ext and prep:
            ratios.append(prep / ext)
        lines.append(
            f"| {c} | {tps_cell(agg, 'extended', c, 'pgcorral')} | {tps_cell(agg, 'prepared_tx', c, 'pgcorral')} "
            f"| {f_ratio(prep, ext)} | {f_ratio(d_prep, d_ext)} |"
        )
    if ratios:
        summary = (
            f"pgcorral in transaction mode, `--protocol prepared` ÷ `--protocol extended` TPS: "
            f"**{statistics.median(ratios):.2f}×** (median over {len(ratios)} client count(s); "
            f"{min(ratios):.2f}× to {max(ratios):.2f}×)."
        )
    else:
        summary = (
            "pgcorral in transaction mode, `--protocol prepared` ÷ `--protocol extended` TPS: – "
            "(no client count has both a prepared and an extended result)."
        )
    return summary, "\n".join(lines)


def storm_table(agg, clients_list, part="storm"):
    lines = [
        "| Clients | Target | TPS (= connections/s) | vs PgBouncer | vs direct | Avg connection time ms (pgbench) "
        "| CPU µs per connection + tx |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for c in clients_list:
        b = cell_value(agg, part, c, "pgbouncer", "tps")
        d = cell_value(agg, part, c, "direct", "tps")
        for t in TARGETS:
            g = agg.get((part, c, t))
            if g is None:
                continue
            tps = cell_value(agg, part, c, t, "tps")
            cpu = cell_value(agg, part, c, t, "cpu_us_per_tx")
            lines.append(
                f"| {c} | {LABELS[t]} | {tps_cell(agg, part, c, t)} | {f_ratio(tps, b)} | {f_ratio(tps, d)} "
                f"| {f_lat(cell_value(agg, part, c, t, 'avg_connection_ms'))} "
                f"| {f_num(cpu, 1) if t != 'direct' else 'n/m'} |"
            )
    return "\n".join(lines)


def tls_cost_table(agg, clients_list):
    """The TLS storm against the plain storm at the same client count, per target: what TLS
    costs in connections per second and in the pooler's CPU per connection."""
    lines = [
        "| Clients | Target | TPS plain storm | TPS TLS storm | TLS ÷ plain | CPU µs/conn plain | CPU µs/conn TLS "
        "| CPU µs added by TLS per connection |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    any_row = False
    for c in clients_list:
        for t in TARGETS:
            if ("storm", c, t) not in agg or ("tls-storm", c, t) not in agg:
                continue
            any_row = True
            p_tps = cell_value(agg, "storm", c, t, "tps")
            t_tps = cell_value(agg, "tls-storm", c, t, "tps")
            p_cpu = cell_value(agg, "storm", c, t, "cpu_us_per_tx")
            t_cpu = cell_value(agg, "tls-storm", c, t, "cpu_us_per_tx")
            added = (t_cpu - p_cpu) if t_cpu is not None and p_cpu is not None else None
            direct = t == "direct"
            lines.append(
                f"| {c} | {LABELS[t]} | {tps_cell(agg, 'storm', c, t)} | {tps_cell(agg, 'tls-storm', c, t)} "
                f"| {f_ratio(t_tps, p_tps)} | {'n/m' if direct else f_num(p_cpu, 1)} "
                f"| {'n/m' if direct else f_num(t_cpu, 1)} | {'n/m' if direct else f_num(added, 1)} |"
            )
    return "\n".join(lines) if any_row else None


def load_tls_info(path):
    """run.sh's TLS check: target, what libpq negotiated, whether SCRAM-SHA-256-PLUS works."""
    rows = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 3:
                    rows[parts[0]] = (parts[1], parts[2])
    return rows


def memory_table(mem):
    lines = [
        "| Pooler | Idle clients | RSS before (MiB) | RSS with clients (MiB) | RSS per idle client (bytes) "
        "| Time to log them in (s) | Notes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for m in mem:
        per = None
        if m.get("rss_before_kb") is not None and m.get("rss_after_kb") is not None and m.get("count"):
            per = (m["rss_after_kb"] - m["rss_before_kb"]) * 1024 / m["count"]
        note = m.get("error") or ""
        if m.get("lost"):
            note += f" {m['lost']} connection(s) closed by the pooler while idle."
        lines.append(
            f"| {LABELS.get(m['target'], m['target'])} | {m.get('count', 0):,} "
            f"| {f_num(m['rss_before_kb'] / 1024 if m.get('rss_before_kb') is not None else None, 1)} "
            f"| {f_num(m['rss_after_kb'] / 1024 if m.get('rss_after_kb') is not None else None, 1)} "
            f"| {f_num(per)} | {f_num(m.get('login_seconds'), 1)} | {note.strip()} |"
        )
    return "\n".join(lines)


def errors_section(cells, mem):
    out = []
    for c in cells:
        if c.get("skipped"):
            continue
        bad = c["rc"] != 0 or (c.get("failed") or 0) > 0 or c.get("error_lines", 0) > 0 or c.get("tps") is None
        if not bad:
            continue
        what = f"`{c['part']}` {c['clients']} clients, {LABELS[c['target']]}, repetition {c['rep']}"
        detail = (
            f"pgbench exit status {c['rc']}"
            + (" (killed by the harness's time limit)" if c["rc"] == 124 else "")
            + f", {c.get('failed') if c.get('failed') is not None else '?'} failed transactions, "
            f"{c.get('error_lines', 0)} error line(s); output in `bench/work/runs/{c['out']}`"
        )
        out.append(f"- {what}: {detail}")
        for e in c.get("errors", []):
            out.append(f"  - `{e}`")
    for m in mem:
        if m.get("error"):
            out.append(f"- memory, {LABELS.get(m['target'], m['target'])}: {m['error']}")
            for e in m.get("detail", [])[:5]:
                out.append(f"  - `{e}`")
    return "\n".join(out) if out else "None: every run exited 0 with no failed transactions and no error output."


def chart(agg, parts_present, clients_by_part, storm_groups, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    panels = [p for p in PARTS if p[0] in parts_present]
    n = len(panels) + (1 if storm_groups else 0)
    if n == 0:
        return False
    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.4 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    styles = {"direct": ("tab:gray", "s"), "pgbouncer": ("tab:blue", "o"), "pgcorral": ("tab:orange", "^")}
    i = 0
    for part, title in panels:
        ax = flat[i]
        i += 1
        xs = clients_by_part[part]
        for t in TARGETS:
            ys = [cell_value(agg, part, c, t, "tps") for c in xs]
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if not pts:
                continue
            color, marker = styles[t]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=LABELS[t])
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        if len(xs) == 1:
            ax.set_xlim(xs[0] / 2, xs[0] * 2)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_xlabel("clients (log scale)")
        ax.set_ylabel("transactions per second")
        ax.set_title(title.replace("`", ""), fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if storm_groups:
        # One group of bars per (part, clients): the plain storm, then the TLS storm.
        ax = flat[i]
        i += 1
        width = 0.8 / len(TARGETS)
        for j, t in enumerate(TARGETS):
            ys = [cell_value(agg, part, c, t, "tps") or 0 for part, c in storm_groups]
            color, _ = styles[t]
            ax.bar([k + (j - 1) * width for k in range(len(storm_groups))], ys, width, color=color, label=LABELS[t])
        ax.set_xticks(range(len(storm_groups)))
        ax.set_xticklabels(
            [f"{c} clients" + (", TLS" if part == "tls-storm" else "") for part, c in storm_groups]
        )
        ax.set_ylabel("connections (+1 tx) per second")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        tls = any(part == "tls-storm" for part, _ in storm_groups)
        plain = any(part == "storm" for part, _ in storm_groups)
        what = "SCRAM" if not tls else ("TLS + SCRAM" if not plain else "SCRAM; TLS + SCRAM")
        ax.set_title(f"Connection storm: pgbench -S -C ({what} on every connection)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in flat[i:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def section(o, title, intro, table):
    """Appends a report section (heading, intro, table) to `o`; nothing when the table is empty."""
    if table:
        o.extend([f"## {title}", "", intro, "", table, ""])


def cmd_report(a):
    cells = load_jsonl(a.cells)
    mem = load_jsonl(a.memory)
    agg = aggregate(cells)
    md_path = a.out
    png_path = os.path.splitext(md_path)[0] + ".png"
    base = os.path.basename(md_path)[:-3]

    def clients_of(part):
        return sorted({c["clients"] for c in cells if c["part"] == part})

    parts_present = [p for p, _ in PARTS if clients_of(p)]
    clients_by_part = {p: clients_of(p) for p, _ in PARTS}
    storm_clients = clients_of("storm")
    tls_clients = clients_of("tls-storm")
    storm_groups = [("storm", c) for c in storm_clients] + [("tls-storm", c) for c in tls_clients]
    tls_info = load_tls_info(a.tls_info)

    o = []
    o.append(f"# Benchmark: PostgreSQL direct vs PgBouncer vs pgcorral, {a.date}")
    o.append("")
    # Only the settings of the parts that ran.
    ran = a.parts.split()
    optional = [
        ("prepared", f"prepared in session mode at `{a.prepared_clients}`"),
        ("storm", f"storm at `{a.storm_clients}` clients"),
        ("tls-storm", f"TLS storm at `{a.tls_clients}`"),
        ("memory", f"`BENCH_IDLE={a.idle}`"),
    ]
    parts_settings = "".join(f"{text}, " for part, text in optional if part in ran)
    o.append(
        f"Made by `bench/run.sh` (see [bench/README.md](../README.md)) in {a.duration}. "
        f"Settings: `BENCH_PARTS=\"{a.parts}\"`, `BENCH_T={a.t}` s per run, `BENCH_REPS={a.reps}` (each number is the median of the "
        f"repetitions), `BENCH_CLIENTS=\"{a.clients}\"` (also prepared in transaction mode), {parts_settings}"
        f"pgbench `-j {a.jobs}`, scale {a.scale}, pool size {a.pool_size}."
    )
    if a.note:
        o.append("")
        o.append(f"> {a.note}")
    o.append("")
    o.append("## Machine")
    o.append("")
    o.append("| | |")
    o.append("|---|---|")
    for k, v in machine_info(a):
        o.append(f"| {k} | {v} |")
    o.append("")
    o.append("## Setup")
    o.append("")
    o.append(
        f"One PostgreSQL started for the run (initdb into `bench/work/`, fsync off, shared_buffers 256MB, "
        f"max_connections {a.max_connections}, pgbench scale {a.scale}); PgBouncer and pgcorral in front of it, "
        f"configured alike: transaction mode for database `bench`, session mode for `bench_session`, pool "
        f"size {a.pool_size}, clients and poolers log in with SCRAM-SHA-256 as user `bench` (the poolers with the "
        "plaintext password), quiet logging (pgcorral `log_level = \"warn\"`, PgBouncer log_connections = 0, "
        "log_disconnections = 0, log_stats = 0), pgcorral `workers = 0` (one per core), both poolers "
        "in plaintext to PostgreSQL (`server_tls_sslmode = disable`). Direct clients also "
        "log in with SCRAM (pg_hba). Clients are plaintext (`PGSSLMODE=disable`) except in the TLS storm. pgbench, PostgreSQL and the pooler share the same cores. Targets are "
        "run one after the other for each cell, in an order rotated every repetition."
    )
    o.append("")
    o.append(
        "Columns: TPS from pgbench (`tps = … (without initial connection time)`); latency mean and p99 "
        "from pgbench's per-transaction log (`-l`), in ms. CPU µs/tx, *run*: (utime + stime of the pooler "
        "process, all threads, from `/proc/PID/stat`, after − before the pgbench run) ÷ transactions "
        "pgbench reports; this includes the clients' logins and logouts (one SCRAM login per client). "
        "*steady*: the same, sampled every 0.1 s, between the first and the last completed transaction "
        "(so without the logins and logouts) ÷ the transactions completed in that window. "
        f"n/a: not run (direct PostgreSQL beyond max_connections {a.max_connections}). "
        "⚠: at least one repetition had errors, see below. fails: pgbench failed (exited non-zero) in "
        "every repetition, so there is no result."
    )
    o.append("")
    for part, title in PARTS:
        if part not in parts_present:
            continue
        o.append(f"## {title}")
        o.append("")
        if part == "prepared_tx":
            o.append(
                "Database `bench`, transaction mode, the clients of the simple and extended parts: each "
                "pgbench client prepares its statement once (Parse with a name, then Bind/Execute by that "
                "name in every transaction), and the pooler must make that name work on whichever server "
                "the next transaction gets. PgBouncer supports this from 1.21 when `max_prepared_statements` "
                "is set (the harness keeps PgBouncer's default, which turns it on only in later releases); "
                "without it PgBouncer passes the statements through, a server answers `prepared statement … "
                "does not exist` or `… already exists`, pgbench aborts the clients, and the cell says "
                "*fails* (details under *Errors and failures*)."
            )
            o.append("")
        if part == "prepared":
            o.append(
                f"Session mode, so each client keeps one of the {a.pool_size} server connections for its whole "
                f"session; run only at `{a.prepared_clients}` clients (≤ pool size {a.pool_size}: more clients "
                "would wait for a connection, not run). Direct PostgreSQL uses database `bench`."
            )
            o.append("")
        o.append(part_table(agg, part, clients_by_part[part]))
        o.append("")
        if part == "prepared_tx":
            summary, table = prepared_vs_extended(agg, clients_by_part[part])
            o.append(summary)
            o.append("")
            o.append(table)
            o.append("")
    section(
        o,
        "Pooler CPU per transaction: user and system time",
        "The *steady* CPU µs/tx of the tables above split into user time (utime: the pooler's own "
        "code) and system time (stime: the kernel working for it: system calls, TCP over loopback, "
        "waking the processes it sends to), each the median of the repetitions (so user + system "
        "may differ a little from the steady median above). Both poolers make the same "
        "system calls and send the same segments per transaction, so a difference in system time "
        "points at the machine (load, scheduling) rather than at the pooler; user time is where "
        "the poolers' own work differs.",
        cpu_split_table(agg, parts_present, clients_by_part),
    )
    section(
        o,
        "Paired within each repetition",
        "The tables above give the median of each target over the repetitions, and their ratios "
        "are ratios of those medians. Here each repetition is compared on its own (the three "
        "targets of a cell run one after the other, a minute at most apart), then the median "
        "taken: when the machine speeds up or slows down between repetitions, this is the "
        "steadier comparison. In the CPU column a negative figure means pgcorral spent less "
        "than PgBouncer.",
        paired_table(agg, parts_present, clients_by_part),
    )
    if storm_clients:
        o.append("## Connection storm: `pgbench -S -C --protocol simple`, transaction mode")
        o.append("")
        o.append(
            "Every transaction opens a new connection and logs in with SCRAM-SHA-256 (with direct "
            "PostgreSQL that is also a new backend process). TPS includes reconnection times; "
            "average connection time from pgbench. No latency columns: pgbench connects "
            "synchronously, so under `-C` a transaction's latency mostly measures the other "
            "clients' logins on the same pgbench thread. CPU per connection + tx: the pooler's CPU "
            "time ÷ transactions (n/m: not measured for PostgreSQL)."
        )
        o.append("")
        o.append(storm_table(agg, storm_clients))
        o.append("")
    if tls_clients:
        o.append("## TLS connection storm: `PGSSLMODE=require pgbench -S -C --protocol simple`, transaction mode")
        o.append("")
        o.append(
            "As the storm, but every connection first does a full TLS handshake (libpq's SSLRequest, "
            "then TLS; no session resumption), then SCRAM-SHA-256 inside TLS. PgBouncer and pgcorral "
            "here are a second instance of each, configured as the others plus `client_tls_sslmode = "
            "require` and the same certificate and key (default TLS protocols and ciphers); direct "
            "PostgreSQL has `ssl = on` with that certificate and key. "
            f"Certificate: self-signed, {a.tls_key or '?'}, made for the run with `openssl req`. Both "
            "poolers stay in plaintext to PostgreSQL. CPU per connection + tx: the pooler's CPU time ÷ "
            "transactions, now including the TLS handshake."
        )
        o.append("")
        if tls_info:
            o.append(
                "What libpq negotiated with each (PostgreSQL's `pg_stat_ssl`, the poolers' SHOW CLIENTS "
                "`tls`), checked before the runs, and whether it offers SCRAM-SHA-256-PLUS (channel "
                "binding, which libpq uses when offered: `PGCHANNELBINDING=require` logs in):"
            )
            o.append("")
            o.append("| Target | TLS | SCRAM-SHA-256-PLUS |")
            o.append("|---|---|---|")
            for t in TARGETS:
                if t in tls_info:
                    o.append(f"| {LABELS[t]} | {tls_info[t][0]} | {tls_info[t][1]} |")
            o.append("")
        o.append(storm_table(agg, tls_clients, "tls-storm"))
        o.append("")
        cost = tls_cost_table(agg, tls_clients)
        if cost:
            o.append(
                "What TLS costs: the TLS storm against the plain storm at the same clients (medians of "
                "each; the plain storm's clients skip the SSLRequest, `PGSSLMODE=disable`)."
            )
            o.append("")
            o.append(cost)
            o.append("")
    if mem:
        o.append("## Memory: idle clients")
        o.append("")
        o.append(
            "VmRSS of the pooler process (`/proc/PID/status`) before and while idle clients are connected: "
            "`examples/idle_clients.rs` logs them in with SCRAM (tokio-postgres, 64 logins at a time) to "
            "database `bench` (transaction mode) and holds them idle. RSS per idle client = (with − before) "
            "÷ clients. Measured on freshly started poolers, before the pgbench runs."
        )
        o.append("")
        o.append(memory_table(mem))
        o.append("")
    o.append("## Errors and failures")
    o.append("")
    o.append(errors_section(cells, mem))
    o.append("")
    if chart(agg, parts_present, clients_by_part, storm_groups, png_path):
        o.append("## Chart")
        o.append("")
        o.append(f"![TPS against clients]({base}.png)")
        o.append("")
    o.append("## All runs")
    o.append("")
    o.append("<details><summary>Every pgbench run, in the order run</summary>")
    o.append("")
    o.append(
        "| Part | Clients | Target | Rep | -T s | Logins s | Measured s | TPS | Transactions | Failed | Mean ms "
        "| p99 ms | Pooler CPU ticks | CPU µs/tx run / steady | Exit |"
    )
    o.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cells:
        if c.get("skipped"):
            continue
        o.append(
            f"| {c['part']} | {c['clients']} | {c['target']} | {c['rep']} | {c.get('duration_s', '–')} "
            f"| {f_num((c['initial_connection_ms'] / 1000) if c.get('initial_connection_ms') is not None else None, 1)} "
            f"| {f_num(c.get('measured_s'), 1)} | {f_num(c.get('tps'))} "
            f"| {f_num(c.get('transactions'))} | {c.get('failed') if c.get('failed') is not None else '–'} "
            f"| {f_lat(c.get('lat_mean_ms'))} | {f_lat(c.get('lat_p99_ms'))} "
            f"| {c.get('cpu_ticks') if c.get('cpu_ticks') is not None else '–'} "
            f"| {f_num(c.get('cpu_us_per_tx'), 1)} / {f_num(c.get('cpu_us_per_tx_steady'), 1)} | {c['rc']} |"
        )
    o.append("")
    o.append("</details>")
    o.append("")
    with open(md_path, "w") as f:
        f.write("\n".join(o))
    print(md_path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("cell", help="parse one pgbench run, print one JSON line")
    c.add_argument("--out", required=True, help="pgbench's stdout+stderr")
    c.add_argument("--logs", help="directory of the per-transaction logs (tx.*)")
    c.add_argument("--part", required=True)
    c.add_argument("--clients", type=int, required=True)
    c.add_argument("--target", required=True)
    c.add_argument("--rep", type=int, required=True)
    c.add_argument("--rc", type=int, required=True)
    c.add_argument("--cpu-before", type=int)
    c.add_argument("--cpu-after", type=int)
    c.add_argument("--clk-tck", type=int, default=100)
    c.add_argument("--cpu-samples", help="output of `sample` for the pooler during the run")
    c.add_argument("--duration", type=int, help="pgbench -T")
    c.add_argument("--bench-t", type=int, help="BENCH_T: seconds meant to be measured")
    c.set_defaults(func=cmd_cell)

    sm = sub.add_parser("sample", help="sample a process's CPU ticks every --interval seconds")
    sm.add_argument("--pid", type=int, required=True)
    sm.add_argument("--out", required=True)
    sm.add_argument("--interval", type=float, default=0.1)
    sm.set_defaults(func=cmd_sample)

    r = sub.add_parser("report", help="write the markdown report and the chart")
    r.add_argument("--cells", required=True)
    r.add_argument("--memory")
    r.add_argument("--out", required=True, help="the .md to write; the .png goes beside it")
    r.add_argument("--date", required=True)
    r.add_argument("--duration", default="?")
    r.add_argument("--t", default="?")
    r.add_argument("--reps", default="?")
    r.add_argument("--clients", default="?")
    r.add_argument("--prepared-clients", default="?")
    r.add_argument("--storm-clients", default="?")
    r.add_argument("--parts", default="?")
    r.add_argument("--tls-clients", default="?")
    r.add_argument("--tls-key", default="", help="the certificate's key and signature, for the report")
    r.add_argument("--tls-info", help="run.sh's TLS check: target<TAB>negotiated<TAB>PLUS yes/no")
    r.add_argument("--jobs", default="?")
    r.add_argument("--scale", default="?")
    r.add_argument("--pool-size", default="?")
    r.add_argument("--idle", default="?")
    r.add_argument("--max-connections", default="?")
    r.add_argument("--pg-bindir", required=True)
    r.add_argument("--pgbouncer", required=True)
    r.add_argument("--pgcorral", required=True)
    r.add_argument("--pgcorral-build", default="release", help="how the binary was built (release, or PGO)")
    r.add_argument("--git-rev", default="?")
    r.add_argument("--load-start", default="")
    r.add_argument("--load-end", default="")
    r.add_argument("--note", default="")
    r.set_defaults(func=cmd_report)

    a = p.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
