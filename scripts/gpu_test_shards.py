#!/usr/bin/env python3
"""Balanced shards for the GPU tests (scripts/gpu-check's gpu-tests step).

gtest's own sharding deals tests out by index, so one shard can draw the 40-65 s split and FP8
tests while another draws only seconds' worth: on the H100 eight such shards took 211-279 s
and the step's time limit cut two of them. Here each test's cost comes from a table measured on
the H100 (tests/gpu/test_seconds.tsv); the tests go longest first, each onto the shard with the
least work so far, and each shard gets an explicit gtest filter. A test missing from the table
(new since it was measured) costs the table's median.

    gpu_test_shards.py --costs TSV --shards N < LIST   one filter a line (LIST: --gtest_list_tests)
    gpu_test_shards.py --costs-from-log LOG > TSV      the table from a gtest log's timings
"""
import argparse
import heapq
import re
import statistics
import sys


def parse_test_list(text):
    """Full test names from `--gtest_list_tests` output: "Suite." lines, then indented test lines
    (comments after '#' dropped; lines that are neither, such as "Running main() ...", ignored)."""
    names, suite = [], None
    for line in text.splitlines():
        body = line.split("#", 1)[0].rstrip()
        if not body:
            continue
        if not line.startswith(" "):
            suite = body if body.endswith(".") else None
        elif suite:
            names.append(suite + body.strip())
    return names


def parse_costs(text):
    """{test name: seconds} from a table of "seconds<TAB>name" lines."""
    costs = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            seconds, name = line.split("\t", 1)
            costs[name.strip()] = float(seconds)
    return costs


def costs_from_log(text):
    """{test name: seconds} from gtest's "[       OK ] Name (N ms)", "[  SKIPPED ] Name (N ms)" and
    "[  FAILED  ] Name, where ... (N ms)" lines; a test timed more than once keeps its longest time."""
    costs = {}
    for m in re.finditer(r"^\[ +(?:OK|SKIPPED|FAILED) +\] ([^\s,]+)(?:, where .*)? \((\d+) ms\)$", text, flags=re.M):
        costs[m.group(1)] = max(costs.get(m.group(1), 0.0), int(m.group(2)) / 1000.0)
    return costs


def balanced_shards(names, costs, shards):
    """Up to `shards` lists of names, longest first onto the least loaded (list scheduling);
    empty shards are left out. Ties go by name, so the split is the same from run to run."""
    known = [costs[n] for n in names if n in costs]
    default = statistics.median(known) if known else 1.0
    work = sorted(names, key=lambda n: (-costs.get(n, default), n))
    heap = [(0.0, i) for i in range(max(1, shards))]
    out = [[] for _ in heap]
    for name in work:
        load, i = heapq.heappop(heap)
        out[i].append(name)
        heapq.heappush(heap, (load + costs.get(name, default), i))
    return [s for s in out if s]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--costs", help="the seconds table (seconds<TAB>test name a line)")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--costs-from-log", metavar="LOG", help="print the table from a gtest log instead")
    args = ap.parse_args(argv)
    if args.costs_from_log:
        costs = costs_from_log(open(args.costs_from_log, encoding="utf-8", errors="replace").read())
        print("# seconds\ttest (scripts/gpu_test_shards.py --costs-from-log)")
        for name in sorted(costs):
            print(f"{costs[name]:.3f}\t{name}")
        return 0
    if not args.costs or args.shards < 1:
        ap.error("--costs and --shards >= 1 (or --costs-from-log)")
    names = parse_test_list(sys.stdin.read())
    if not names:
        return 1
    for shard in balanced_shards(names, parse_costs(open(args.costs, encoding="utf-8").read()), args.shards):
        print(":".join(shard))
    return 0


if __name__ == "__main__":
    sys.exit(main())
