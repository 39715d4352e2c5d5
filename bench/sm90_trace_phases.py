#!/usr/bin/env python3
"""Per-item phase medians from an MLAKIT_SM90_TRACE=1 block timeline (the file mlakit-bench writes
with MLAKIT_SM90_TRACE_FILE set; bench/sm90_trace.py gives the launch-level shares).

Phases of one item, as consumer thread 0 of warpgroup 1 stamps them (prefill_kernel_sm90.cuh):
begin (item taken) -> qk (Q and the first K landed) -> s0 (first S done) -> vlast (the last tile's
V landed) -> next (the next item taken; v12: after the last P V's issue) -> pv (last P V done) ->
ostage (both warpgroups at the O staging barrier) -> end (epilogue done) -> the next item's begin.

    python3 bench/sm90_trace_phases.py TRACE.d192_bf16.txt [...]
"""
import collections
import statistics
import sys

PHASES = (("begin->qk", 0, 3), ("qk->s0 (first S)", 3, 1), ("s0->vlast", 1, 4), ("vlast->next", 4, 5),
          ("next->pv", 5, 6), ("pv->ostage", 6, 7), ("ostage->end (epilogue)", 7, 2))


def main():
    for fn in sys.argv[1:]:
        items = collections.defaultdict(list)
        for line in open(fn):
            f = line.split()
            if f and f[0] == "I":  # I block k n_tiles head row0 q_begin begin s0 end qk vlast next pv ostage
                items[int(f[1])].append((int(f[2]), int(f[3]), list(map(int, f[7:15]))))
        ph, by_n = collections.defaultdict(list), collections.defaultdict(lambda: collections.defaultdict(list))
        for its in items.values():
            its.sort()
            for i, (_, nt, v) in enumerate(its):
                d = {name: v[b] - v[a] for name, a, b in PHASES}
                if i + 1 < len(its):
                    d["end->next begin"] = its[i + 1][2][0] - v[2]
                d["item"] = v[2] - v[0]
                for k, x in d.items():
                    ph[k].append(x)
                    by_n[nt][k].append(x)
        print(f"== {fn}: {sum(len(v) for v in items.values())} items; medians (p90), us")
        for k, x in ph.items():
            print(f"  {k:24s} {statistics.median(x) / 1e3:7.2f} ({sorted(x)[int(0.9 * (len(x) - 1))] / 1e3:.2f})")
        for nt in sorted(by_n)[:3]:
            print(f"  n_tiles {nt}: " + " ".join(f"{k.split()[0]}={statistics.median(x) / 1e3:.2f}"
                                              for k, x in by_n[nt].items()))


if __name__ == "__main__":
    main()
