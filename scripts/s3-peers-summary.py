#!/usr/bin/env python3
"""Summarizes scripts/s3-peers.sh's rounds: for each store, operation and
size, the median (min-max) over the rounds of objects per second and of the
server's CPU per object (every server process: µs, and CPU-s/GB from 1 MiB
up), then each store's rate against the best peer's. Reads the runs'
printed lines (a file, or standard input):

  scripts/s3-peers-summary.py ROUNDS.LOG

A run without a figure is left out and said; a store with none at all is
not in the table. Exits non-zero when the log holds no run.
"""
import re
import statistics
import sys


def parse(lines):
    """Yields (store, op, size, ops_per_s, server_us, server_cpu_s_per_gb)."""
    store = op = size = None
    ops = None
    for line in lines:
        if line.startswith("# spindle"):
            store = "spindle"
        m = re.match(r"# \S+ (\S+) at https?://", line)
        if m:
            store = m.group(1)
        m = re.match(r"## (\w+) (\w+),", line)
        if m:
            op, size, ops = m.group(1), m.group(2), None
        m = re.match(r"\s+s3-(?:put|get)\s+\d+\s+[\d.]+\s+(\d+)\s", line)
        if m:
            ops = int(m.group(1))
        m = re.search(r"server cpu .*?, (\d+) µs/op, ([\d.]+) CPU-s/GB", line)
        if m and store and op and ops is not None:
            yield store, op, size, ops, int(m.group(1)), float(m.group(2))
            ops = None


def spread(xs, fmt, unit):
    """The median with its unit, then (min-max) when they differ."""
    lo, hi = min(xs), max(xs)
    med = fmt(statistics.median(xs)) + unit
    if lo == hi:
        return med
    return f"{med} ({fmt(lo)}-{fmt(hi)})"


def main():
    src = open(sys.argv[1], encoding="utf-8") if len(sys.argv) > 1 else sys.stdin
    runs = {}
    for store, op, size, ops, us, gb in parse(src):
        runs.setdefault((op, size), {}).setdefault(store, []).append((ops, us, gb))
    if not runs:
        print("s3-peers-summary: no run in the log", file=sys.stderr)
        return 1
    stores = []
    for by in runs.values():
        for s in by:
            if s not in stores:
                stores.append(s)
    print("# summary: median (min-max) over the rounds; objects/s, server CPU per object")
    print("| workload | " + " | ".join(f"{s} (rounds)" for s in stores) + " | spindle / best peer |")
    print("|---" * (len(stores) + 2) + "|")
    for (op, size), by in runs.items():
        big = size.endswith("MiB") or size.endswith("GiB")
        cells = []
        for s in stores:
            rs = by.get(s)
            if not rs:
                cells.append("-")
                continue
            rate = spread([r[0] for r in rs], lambda v: f"{v:,.0f}", "/s")
            if big:
                cpu = spread([r[2] for r in rs], lambda v: f"{v:.2f}", " CPU-s/GB")
            else:
                cpu = spread([r[1] for r in rs], lambda v: f"{v:,.0f}", " µs")
            cells.append(f"{rate}, {cpu} ({len(rs)})")
        ratio = "-"
        if "spindle" in by:
            peers = [statistics.median([r[0] for r in rs]) for s, rs in by.items() if s != "spindle"]
            if peers:
                ratio = f"{statistics.median([r[0] for r in by['spindle']]) / max(peers):.2f}×"
        print(f"| {op.upper()} {size} | " + " | ".join(cells) + f" | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
