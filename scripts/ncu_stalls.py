#!/usr/bin/env python3
"""Where a kernel's warps wait: Nsight Compute's source page (SASS, CSV) summed.

  ncu --import R.ncu-rep --page source --csv --print-source sass > R.csv
  scripts/ncu_stalls.py R.csv [--top N]

Prints the samples' total, their share by opcode (the SASS mnemonic without
predicate or modifiers), the warp instructions executed by opcode, the
samples by stall reason, and the N instructions with the most samples, in
address order, each with its first three reasons.
"""
import argparse
import collections
import csv
import io
import sys


def read_rows(path):
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    # ncu prints the kernel's name (and may print its own lines) before the
    # table: start at the header, the first row with a field named Source.
    start = next((i for i, l in enumerate(lines) if "Source" in next(csv.reader([l]), [])), None)
    if start is None:
        sys.exit(f"{path}: no CSV header with a Source column")
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    return header, [r for r in reader if len(r) == len(header)]


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(sass):
    words = sass.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=24)
    args = ap.parse_args()
    header, rows = read_rows(args.csv)
    col = {h: i for i, h in enumerate(header)}
    total_col = next((h for h in header if h.startswith("Warp Stall Sampling (All")), None)
    if total_col is None:
        sys.exit(f"{args.csv}: no 'Warp Stall Sampling (All Samples)' column; columns: {header}")
    # stall_X counts every sample of reason X; "stall_X (Not Issued)" the subset of them that issued nothing.
    reason_cols = [h for h in header if h.startswith("stall_") and not h.endswith("(Not Issued)")]
    src = col.get("Source", 1)
    samples = [number(r[col[total_col]]) for r in rows]
    total = sum(samples) or 1.0
    print(f"stall samples: {int(total)} over {len(rows)} instructions; columns: {len(header)}"
          f" ({len(reason_cols)} per-reason)")
    by_op = collections.Counter()
    for r, s in zip(rows, samples):
        by_op[opcode(r[src])] += s
    print("by opcode: " + ", ".join(f"{op} {100 * s / total:.1f}%" for op, s in by_op.most_common(12)))
    if "Instructions Executed" in col:
        executed = [number(r[col["Instructions Executed"]]) for r in rows]
        n = sum(executed) or 1.0
        ops = collections.Counter()
        for r, e in zip(rows, executed):
            ops[opcode(r[src])] += e
        print(f"warp instructions executed: {int(n)}; by opcode: "
              + ", ".join(f"{op} {100 * e / n:.1f}%" for op, e in ops.most_common(10)))
    if reason_cols:
        sums = {h: sum(number(r[col[h]]) for r in rows) for h in reason_cols}
        top = sorted(sums.items(), key=lambda kv: -kv[1])[:10]
        print("by reason: " + ", ".join(f"{h} {100 * v / total:.1f}%" for h, v in top if v))
    order = sorted(range(len(rows)), key=lambda i: -samples[i])[: args.top]
    addr = col.get("Address")
    for i in sorted(order, key=lambda i: i):
        r = rows[i]
        why = ""
        if reason_cols:
            rs = sorted(((number(r[col[h]]), h) for h in reason_cols), reverse=True)[:3]
            why = "  [" + ", ".join(f"{h.replace('stall_', '')} {100 * v / total:.1f}%" for v, h in rs if v) + "]"
        where = r[addr] if addr is not None else str(i)
        print(f"{where:>6} {100 * samples[i] / total:5.1f}%  {r[src].strip()[:70]}{why}")


if __name__ == "__main__":
    main()
