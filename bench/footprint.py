#!/usr/bin/env python3
"""Hot code footprint from a callgrind file made with --dump-instr=yes: the instructions executed
at least once per transaction on average, and the distinct 64-byte cache lines they occupy.
Those lines are what the CPU must fetch again after anything else (the kernel, PostgreSQL,
pgbench) has run on the core; see bench/README.md.

    footprint.py FILE TRANSACTIONS           -> "<hot instructions> <lines>"
    footprint.py FILE TRANSACTIONS --top N   -> the N functions with the most lines, too
"""
import re
import sys
from collections import defaultdict

LINE = 64


def parse(path):
    """Self Ir per instruction address, and the function each address belongs to."""
    names = {}
    positions = ["line"]
    last = [0, 0]
    ir_at = defaultdict(int)
    fn_of = {}
    fn = None
    after_call = False

    def name(v):
        m = re.match(r"\((\d+)\)(?: (.*))?", v)
        if not m:
            return v
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), v)

    def position(tok, i):
        if tok == "*":
            return last[i]
        if tok[0] in "+-":
            n = int(tok[1:], 0)
            return last[i] + (n if tok[0] == "+" else -n)
        return int(tok, 0)

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                n = len(positions)
                for i in range(n):
                    last[i] = position(parts[i], i)
                if after_call:
                    # The cost of a call, inclusive of the callee: not this function's own.
                    after_call = False
                    continue
                if len(parts) > n:
                    ir_at[last[0]] += int(parts[n])
                    fn_of[last[0]] = fn
                continue
            if line.startswith("positions:"):
                positions = line.split()[1:]
                continue
            key, _, v = line.partition("=")
            if key == "fn":
                fn = name(v)
            elif key == "cfn":
                name(v)
            elif key == "calls":
                after_call = True
    if positions[0] != "instr":
        sys.exit(f"{path}: no instruction positions (run callgrind with --dump-instr=yes)")
    return ir_at, fn_of


def main():
    path, tx = sys.argv[1], float(sys.argv[2])
    top = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--top" else 0
    ir_at, fn_of = parse(path)
    hot = [a for a, n in ir_at.items() if n >= tx]
    print(len(hot), len({a // LINE for a in hot}))
    if top:
        per_fn = defaultdict(lambda: [0, set()])
        for a in hot:
            per_fn[fn_of[a]][0] += 1
            per_fn[fn_of[a]][1].add(a // LINE)
        ranked = sorted(per_fn.items(), key=lambda kv: -len(kv[1][1]))[:top]
        for f, (n, lines) in ranked:
            print(f"{n:6d} {len(lines):5d}  {(f or '?')[:110]}")


if __name__ == "__main__":
    main()
