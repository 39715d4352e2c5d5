#!/usr/bin/env python3
"""Where a pair of tiles' cycles go in the latent kernel, from a trace build's stamps
(MLAKIT_SM90_TRACE=1, src/cuda/sm90/latent_trace_sm90.cuh).

Each warpgroup's thread 0 stamps its steps through a pair; this prints, over the pairs inside
items (not an item's first or last pair), the median and the 10th / 90th percentiles of every
step's time from warpgroup 0's pair top, the pair period (one top to the next), and the gap
between one item's last pair and the next item's first.

    MLAKIT_SM90_TRACE_FILE=/tmp/t python3 bench/diagnostics/latent_launch.py decode_h128
    python3 bench/diagnostics/latent_trace.py /tmp/t.latent_bf16.txt
"""
import argparse
import statistics
import sys

STEPS = {
    0: ["top", "own part landed", "other part landed", "S0 done", "P0 published", "P0 V0_L done",
        "P1 received", "P1 V1_L done", "stage 0 refill issued", "stage 1 refill issued"],
    1: ["top", "own part landed", "other part landed", "P0 received", "S1 done", "P1 published",
        "P0 V0_R done", "P1 V1_R done", "stage 0 refill issued", "stage 1 refill issued"],
}
# Stamped in the slot of an item's last pair (both warpgroups): the steps of an item change.
ITEM_STEPS = {10: "pair loop left", 11: "rows stored", 12: "next q and tiles issued", 13: "next q landed"}


def read(path):
    """{(block, pair): {"item", "t0", "tiles", 0: [stamps], 1: [stamps]}}; a stamp of -1 is none."""
    pairs = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("P "):
                continue
            v = line.split()
            b, p, item, t0, tiles, wg = (int(x) for x in v[1:7])
            rec = pairs.setdefault((b, p), {"item": item, "t0": t0, "tiles": tiles})
            rec[wg] = [int(x) for x in v[7:]]
    return pairs


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def summarize(pairs):
    """Rows (warpgroup, step, median, p10, p90) of steady pairs, the periods, the item gaps, and
    rows (warpgroup, step, median) of the item changes, from the last P1 V1_L done."""
    offs = {(wg, i): [] for wg in (0, 1) for i in range(len(STEPS[wg]))}
    change = {(wg, i): [] for wg in (0, 1) for i in list(ITEM_STEPS) + ["next top"]}
    periods = []
    for (b, p), rec in sorted(pairs.items()):
        if 0 not in rec or 1 not in rec:
            continue
        nxt = pairs.get((b, p + 1))
        top = rec[0][0]
        if nxt is not None and 0 in nxt:
            if nxt["item"] == rec["item"]:
                if rec["t0"] >= 2 and rec["t0"] + 4 <= rec["tiles"]:
                    periods.append(nxt[0][0] - top)
            elif rec[0][7] >= 0:
                for wg in (0, 1):
                    for i in ITEM_STEPS:
                        if len(rec[wg]) > i and rec[wg][i] >= 0:
                            change[(wg, i)].append(rec[wg][i] - rec[0][7])
                    if wg in nxt:
                        change[(wg, "next top")].append(nxt[wg][0] - rec[0][7])
        if rec["t0"] < 2 or rec["t0"] + 4 > rec["tiles"]:
            continue
        for wg in (0, 1):
            for i, t in enumerate(rec[wg][:len(STEPS[wg])]):
                if t >= 0:
                    offs[(wg, i)].append(t - top)
    rows = [(wg, STEPS[wg][i], statistics.median(xs), pct(xs, 0.1), pct(xs, 0.9))
            for (wg, i), xs in sorted(offs.items()) if xs]
    gaps = change[(0, "next top")]  # the item change as a whole: to warpgroup 0's next top
    item_rows = [(wg, ITEM_STEPS.get(i, i), statistics.median(xs)) for (wg, i), xs in change.items() if xs]
    return rows, periods, gaps, item_rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="+")
    args = ap.parse_args(argv)
    for path in args.trace:
        rows, periods, gaps, item_rows = summarize(read(path))
        print(f"# {path}")
        if not periods:
            print("no pair inside an item was stamped")
            continue
        print(f"pair period: median {statistics.median(periods):.0f} cycles "
              f"(p10 {pct(periods, 0.1)}, p90 {pct(periods, 0.9)}; {len(periods)} pairs)")
        if gaps:
            print(f"item change (last P1 V1_L done -> next top): median {statistics.median(gaps):.0f} cycles")
        print("| warpgroup | step | median | p10 | p90 |")
        print("| --- | --- | --- | --- | --- |")
        for wg, name, med, lo, hi in sorted(rows, key=lambda r: (r[2], r[0])):
            print(f"| {wg} | {name} | {med:.0f} | {lo} | {hi} |")
        if item_rows:
            print("item change, from the last P1 V1_L done (medians):")
            print("| warpgroup | step | cycles |")
            print("| --- | --- | --- |")
            for wg, name, med in sorted(item_rows, key=lambda r: (r[2], r[0])):
                print(f"| {wg} | {name} | {med:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
