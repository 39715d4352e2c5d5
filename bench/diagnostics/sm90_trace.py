#!/usr/bin/env python3
"""Summarize a block timeline of one sm90 launch (a build with MLAKIT_SM90_TRACE=1; see
src/cuda/sm90/trace_sm90.cuh): where the launch's time goes between start-up, items and the tail,
and per kv tile whether the two consumer warpgroups run in lockstep or take turns.

    MLAKIT_SM90_TRACE_FILE=/tmp/t mlakit-bench --kernel sm90 --workload 8x999+200 --no-check
    python3 bench/diagnostics/sm90_trace.py /tmp/t.d192_bf16.txt
"""
import collections
import statistics
import sys


def read_trace(path):
    """blocks {block: (start, end)} and items [dict], times in ns (phase stamps missing from
    older traces read -1)."""
    blocks, items = {}, []
    for line in open(path):
        f = line.split()
        if not f or f[0] == "#":
            continue
        if f[0] == "B":
            blocks[int(f[1])] = (int(f[2]), int(f[3]))
        elif f[0] == "I":
            v = list(map(int, f[1:])) + [-1] * 5
            b, k, n, head, row0, qb, t0, ts, te, tqk, tvl, tnx, tpv = v[:13]
            items.append(dict(b=b, k=k, n=n, head=head, row0=row0, q=qb, t0=t0, ts=ts, te=te, tqk=tqk, tvl=tvl,
                              tnx=tnx, tpv=tpv))
    return blocks, items


def _per_warpgroup_lines(path, tag):
    """(block, k, cw, [ints]) for each line of kind `tag` ("T" or "U")."""
    for line in open(path):
        f = line.split()
        if f and f[0] == tag:
            yield int(f[1]), int(f[2]), int(f[3]), [int(x) for x in f[4:]]


def read_tiles(path):
    """{(block, k): {cw: [cycles or None per tile]}} from the T lines (P of kv tile t ready, in SM
    cycles from warpgroup 0's tile 0), absent in traces older than 2026-12-03."""
    tiles = collections.defaultdict(dict)
    for b, k, cw, v in _per_warpgroup_lines(path, "T"):
        tiles[(b, k)][cw] = [x if x >= 0 else None for x in v]
    return tiles


def read_tile_phases(path):
    """{(block, k): {cw: [(issue, s_done, softmax_done) or None per tile]}} from the U lines (SM
    cycles, same origin as the T lines)."""
    out = collections.defaultdict(dict)
    for b, k, cw, v in _per_warpgroup_lines(path, "U"):
        out[(b, k)][cw] = [tuple(v[i:i + 3]) if min(v[i:i + 3]) >= 0 else None for i in range(0, len(v) - 2, 3)]
    return out


def tile_breakdown(tiles, phases):
    """Per kv tile t >= 1 (both stamp kinds present), medians over items and warpgroups, in SM
    cycles: S's latency (issue -> landed), the softmax (landed -> done), the previous P V's wait
    plus the pack (done -> P ready), and P ready -> the next tile's S issue. Rows: (t, samples,
    s_latency, softmax, pv_wait_pack, to_next_issue or None)."""
    acc = collections.defaultdict(lambda: ([], [], [], []))
    for key, by_cw in phases.items():
        for cw, ph in by_cw.items():
            p_ready = tiles.get(key, {}).get(cw)
            if not p_ready:
                continue
            for t in range(1, min(len(ph), len(p_ready))):
                if ph[t] is None or p_ready[t] is None:
                    continue
                issue, done, sm = ph[t]
                a = acc[t]
                a[0].append(done - issue)
                a[1].append(sm - done)
                a[2].append(p_ready[t] - sm)
                if t + 1 < len(ph) and ph[t + 1] is not None:
                    a[3].append(ph[t + 1][0] - p_ready[t])
    med = lambda v: statistics.median(v) if v else None  # noqa: E731
    return [(t, len(a[0]), med(a[0]), med(a[1]), med(a[2]), med(a[3])) for t, a in sorted(acc.items())]


def warpgroup_phase(tiles):
    """Per kv tile t of the items with both warpgroups stamped: the median tile period of warpgroup
    0 (cycles from P_{t-1} to P_t), the median |offset| between the two warpgroups' P_t, and the
    share of those offsets under a quarter of the period (lockstep) / between a quarter and three
    quarters (taking turns). Rows: (t, items, period, offset, lockstep share, turns share)."""
    rows = []
    n_t = max((len(v[0]) for v in tiles.values() if 0 in v), default=0)
    for t in range(n_t):
        per, off = [], []
        for v in tiles.values():
            if 0 not in v or 1 not in v or t >= len(v[0]) or t >= len(v[1]):
                continue
            a, b = v[0][t], v[1][t]
            if a is None or b is None:
                continue
            off.append(abs(b - a))
            if t > 0 and v[0][t - 1] is not None:
                per.append(a - v[0][t - 1])
        if not off:
            continue
        p = statistics.median(per) if per else None
        lock = turns = None
        if p:
            pairs = [o % p for o in off]
            lock = sum(1 for o in pairs if o < p / 4 or o > 3 * p / 4) / len(pairs)
            turns = 1 - lock
        rows.append((t, len(off), p, statistics.median(off), lock, turns))
    return rows


def main(path):
    blocks, items = read_trace(path)
    if not blocks:
        print("no blocks")
        return
    end = max(e for _, e in blocks.values())
    P = len(blocks)
    print(f"{path}: {P} blocks, {len(items)} items, launch {end / 1e3:.1f} us (first block start to last block end)")
    starts = sorted(s for s, _ in blocks.values())
    ends = sorted(e for _, e in blocks.values())
    print(f"  block starts: min {starts[0]/1e3:.1f} median {statistics.median(starts)/1e3:.1f} max {starts[-1]/1e3:.1f} us")
    print(f"  block ends:   min {ends[0]/1e3:.1f} median {statistics.median(ends)/1e3:.1f} max {ends[-1]/1e3:.1f} us")
    by_b = collections.defaultdict(list)
    for it in items:
        by_b[it["b"]].append(it)
    first_item = [min(x["t0"] for x in v) - blocks[b][0] for b, v in by_b.items()]
    busy = sum(it["te"] - it["t0"] for it in items)
    idle_end = sum(end - e for _, e in blocks.values())
    gaps = []
    for b, v in by_b.items():
        v.sort(key=lambda x: x["k"])
        gaps += [v[i + 1]["t0"] - v[i]["te"] for i in range(len(v) - 1)]
    total = P * end
    print(f"  of {P} x launch = {total/1e6:.2f} block-ms: items {100*busy/total:.1f}%, "
          f"before the first item {100*sum(first_item)/total:.1f}% (median {statistics.median(first_item)/1e3:.2f} us), "
          f"after the block's last item until the launch ends {100*idle_end/total:.1f}%, "
          f"between items {100*sum(gaps)/total:.1f}%")
    by_n = collections.defaultdict(list)
    for it in items:
        by_n[it["n"]].append(it)
    print("  n_tiles  count  median us  first-S us (take item -> S0 landed)  per-tile us")
    for n in sorted(by_n):
        v = by_n[n]
        d = statistics.median(x["te"] - x["t0"] for x in v) / 1e3
        s0 = statistics.median(x["ts"] - x["t0"] for x in v if x["ts"]) / 1e3 if any(x["ts"] for x in v) else 0
        print(f"  {n:7d} {len(v):6d} {d:10.2f} {s0:12.2f} {d / max(n, 1):20.2f}")
    # An item's phases (medians over items with all stamps), for the short items that dominate
    # ragged batches: take -> Q,K landed -> S0 done ... last V landed -> next item taken -> last
    # P V done -> end.
    print("  phases (median us): n  qk-wait  S0  [loop..vlast]  next-item  lastPV  epilogue")
    for n in sorted(by_n)[:4] + sorted(by_n)[-1:]:
        v = [x for x in by_n[n] if min(x["tqk"], x["tvl"], x["tnx"], x["tpv"]) >= 0]
        if not v:
            continue
        m = lambda a, b: statistics.median(x[b] - x[a] for x in v) / 1e3  # noqa: E731
        ep = m('tpv', 'te')
        print(f"  {n:3d} {m('t0', 'tqk'):8.2f} {m('tqk', 'ts'):5.2f} {m('ts', 'tvl'):13.2f} {m('tvl', 'tnx'):10.2f} "
              f"{m('tnx', 'tpv'):7.2f} {ep:9.2f}")
    # Items that finish last: what the tail is made of.
    last = sorted(items, key=lambda x: -x["te"])[:8]
    print("  the last items to finish: (block, k, n_tiles, head, row0, q_begin, begin us, end us)")
    for it in last:
        print(f"    {it['b']:4d} {it['k']:3d} {it['n']:3d} {it['head']:3d} {it['row0']:5d} {it['q']:6d} "
              f"{it['t0']/1e3:8.1f} {it['te']/1e3:8.1f}")
    tiles = read_tiles(path)
    rows = warpgroup_phase(tiles)
    if rows:
        print("  the two consumer warpgroups per kv tile (P ready, SM cycles): t  items  period  |offset|  "
              "lockstep  taking turns")
        for t, n, p, o, lock, turns in rows:
            ps = f"{p:7.0f}" if p else "      -"
            ls = f"{100 * lock:7.0f}%  {100 * turns:9.0f}%" if lock is not None else "        -           -"
            print(f"  {t:3d} {n:6d} {ps} {o:9.0f}  {ls}")
    rows = tile_breakdown(tiles, read_tile_phases(path))
    if rows:
        print("  inside a kv tile (SM cycles, medians): t  samples  S issue->landed  softmax  "
              "P V wait + pack  P ready->next S issue")
        for t, n, sl, smx, pk, nx in rows:
            nxs = f"{nx:8.0f}" if nx is not None else "       -"
            print(f"  {t:3d} {n:7d} {sl:10.0f} {smx:9.0f} {pk:10.0f} {nxs}")
    # Least-squares fit of item duration = c0 + n * t.
    xs = [it["n"] for it in items]
    ys = [(it["te"] - it["t0"]) / 1e3 for it in items]
    if len(set(xs)) > 1:
        mx, my = statistics.mean(xs), statistics.mean(ys)
        t = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        print(f"  fit: item us = {my - t * mx:.2f} + {t:.2f} x n_tiles")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
