#!/usr/bin/env python3
"""Summarize Nsight Compute source pages (SASS, CSV): warp-stall samples by reason over the whole
kernel, then the instructions with the most samples and their two main reasons. With --vs, the
reason totals of two kernels side by side (e.g. mlakit and FlashInfer fa3 on one workload).

  ncu -i report.ncu-rep --page source --print-source sass --csv > src.csv
  python3 bench/diagnostics/ncu_stalls.py src.csv [TOP]
  python3 bench/diagnostics/ncu_stalls.py mlakit.csv --vs fa3.csv [--names mlakit,fa3]
  python3 bench/diagnostics/ncu_stalls.py src.csv --mbarriers

--mbarriers: the samples of each mbarrier wait (SYNCS.PHASECHK and the retry branch after it,
where a waiting warp's samples land), by the wait's shared-memory operand: which handoff the
warps wait for (the kernel's barrier offsets name them).
"""
import argparse
import collections
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


class Page:
    """One kernel's source page: per-instruction rows and the stall-reason columns."""

    def __init__(self, path):
        rows = list(csv.reader(open(path)))
        if len(rows) < 3:
            raise SystemExit(f"{path}: no source page rows (was the ncu filter right?)")
        self.hdr = rows[1]
        self.ix = {h: i for i, h in enumerate(self.hdr)}
        if SAMPLES not in self.ix:
            raise SystemExit(f"{path}: no '{SAMPLES}' column (collect with --section SourceCounters)")
        self.rows = [r for r in rows[2:] if len(r) >= len(self.hdr)]
        self.reasons = [h for h in self.hdr if h.startswith("stall_") and "Not Issued" not in h]

    def count(self, row, col):
        v = row[self.ix[col]]
        return int(v) if v.isdigit() else 0

    def total(self):
        return sum(self.count(r, SAMPLES) for r in self.rows)

    def by_reason(self):
        tot = collections.Counter()
        for r in self.rows:
            for h in self.reasons:
                tot[h] += self.count(r, h)
        return tot

    def top(self, n):
        return sorted(self.rows, key=lambda r: -self.count(r, SAMPLES))[:n]


def summary(page, top_n):
    total = page.total()
    print("total samples", total)
    for h, v in page.by_reason().most_common(12):
        print(f"  {h:28s} {v:9d} {100 * v / max(total, 1):5.1f}%")
    for r in page.top(top_n):
        reasons = sorted(((page.count(r, h), h) for h in page.reasons), reverse=True)[:2]
        print(f"{page.count(r, SAMPLES):>7d} {r[page.ix['Address']][-5:]} "
              f"{r[page.ix['Source']].strip()[:60]:60s} {[(v, h) for v, h in reasons]}")


def mbarrier_waits(page):
    """[(operand, samples, executions)] per mbarrier wait site, most samples first: a
    SYNCS.PHASECHK row and the rows up to the next instruction that is not its retry branch."""
    out = []
    rows = page.rows
    for i, r in enumerate(rows):
        src = r[page.ix["Source"]]
        if "SYNCS.PHASECHK" not in src:
            continue
        m = re.search(r"\[([^\]]*)\]", src)
        samples = page.count(r, SAMPLES)
        j = i + 1
        while j < len(rows) and "BRA" in rows[j][page.ix["Source"]] and "@" in rows[j][page.ix["Source"]]:
            samples += page.count(rows[j], SAMPLES)
            j += 1
        out.append((m.group(1) if m else src.strip(), samples, page.count(r, "Instructions Executed")))
    return sorted(out, key=lambda t: -t[1])


def show_mbarriers(page):
    total = page.total()
    print(f"{'mbarrier operand':32s} {'samples':>9s} {'share':>6s} {'executed':>9s}")
    for op, n, ex in mbarrier_waits(page):
        print(f"{op:32s} {n:9d} {100 * n / max(total, 1):5.1f}% {ex:9d}")


def compare(a, b, names):
    ta, tb = a.total(), b.total()
    ra, rb = a.by_reason(), b.by_reason()
    print(f"{'reason':28s} {names[0]:>18s} {names[1]:>18s} {'difference':>11s}")
    print(f"{'all samples':28s} {ta:18d} {tb:18d} {ta - tb:+11d}")
    for h in sorted(set(ra) | set(rb), key=lambda h: -(ra[h] + rb[h])):
        if ra[h] == 0 and rb[h] == 0:
            continue
        print(f"{h:28s} {ra[h]:10d} ({100 * ra[h] / max(ta, 1):4.1f}%) "
              f"{rb[h]:10d} ({100 * rb[h] / max(tb, 1):4.1f}%) {ra[h] - rb[h]:+11d}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("top", nargs="?", type=int, default=30, help="instructions listed (default 30)")
    ap.add_argument("--vs", help="a second kernel's source page: reason totals side by side")
    ap.add_argument("--names", default="A,B", help="column names for --vs (default A,B)")
    ap.add_argument("--mbarriers", action="store_true", help="samples of each mbarrier wait site")
    args = ap.parse_args(argv)
    a = Page(args.csv)
    if args.mbarriers:
        show_mbarriers(a)
    elif args.vs:
        compare(a, Page(args.vs), (args.names.split(",") + ["B"])[:2])
    else:
        summary(a, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
