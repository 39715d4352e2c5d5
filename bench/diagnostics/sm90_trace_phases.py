#!/usr/bin/env python3
"""Per-item phase medians from an MLAKIT_SM90_TRACE=1 block timeline (the file mlakit-bench writes
with MLAKIT_SM90_TRACE_FILE set; bench/diagnostics/sm90_trace.py gives the launch-level shares).

Phases of one item, as consumer thread 0 of warpgroup 1 stamps them (prefill_kernel_sm90.cuh):
begin (item taken) -> qk (Q and the first K landed) -> s0 (first S done) -> vlast (the last tile's
V landed) -> next (the next item taken) -> pv (last P V done) ->
ostage (both warpgroups at the O staging barrier) -> end (epilogue done) -> the next item's begin.

    python3 bench/diagnostics/sm90_trace_phases.py TRACE.d192_bf16.txt [...]
"""
import collections
import statistics
import sys

from sm90_trace import read_trace

# (name, stamp from, stamp to), stamps as read_trace names them
PHASES = (("begin->qk", "t0", "tqk"), ("qk->s0 (first S)", "tqk", "ts"), ("s0->vlast", "ts", "tvl"),
          ("vlast->next", "tvl", "tnx"), ("next->pv", "tnx", "tpv"), ("pv->ostage", "tpv", "tos"),
          ("ostage->end (epilogue)", "tos", "te"))


def main():
    for fn in sys.argv[1:]:
        _, items = read_trace(fn)
        by_block = collections.defaultdict(list)
        for it in items:
            by_block[it["b"]].append(it)
        ph, by_n = collections.defaultdict(list), collections.defaultdict(lambda: collections.defaultdict(list))
        for its in by_block.values():
            its.sort(key=lambda x: x["k"])
            for i, it in enumerate(its):
                d = {name: it[b] - it[a] for name, a, b in PHASES}
                if i + 1 < len(its):
                    d["end->next begin"] = its[i + 1]["t0"] - it["te"]
                d["item"] = it["te"] - it["t0"]
                for k, x in d.items():
                    ph[k].append(x)
                    by_n[it["n"]][k].append(x)
        print(f"== {fn}: {len(items)} items; medians (p90), us")
        for k, x in ph.items():
            print(f"  {k:24s} {statistics.median(x) / 1e3:7.2f} ({sorted(x)[int(0.9 * (len(x) - 1))] / 1e3:.2f})")
        for nt in sorted(by_n)[:3]:
            print(f"  n_tiles {nt}: " + " ".join(f"{k.split()[0]}={statistics.median(x) / 1e3:.2f}"
                                              for k, x in by_n[nt].items()))


if __name__ == "__main__":
    main()
