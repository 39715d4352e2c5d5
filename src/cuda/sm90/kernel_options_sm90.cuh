// Build options of the sm90 kernel: pipeline variants still under measurement and
// measurement-only builds (docs/perf-notes.md has each one's prediction and outcome). Defaults
// are what ships. Variants that lost were removed once measured (perf-notes names them and the
// commits that hold them: ping-pong, softmax after P V, K not ahead of V, late rescale, K first,
// L2 prefetch of Q and K/V, tensor maps from the parameters, the global tile order, the early
// claim, the cross-item consumer, the epilogue under the next item's first S, tile 1's S under
// tile 0's softmax, the skipped rescale, the stale-max rescale threshold, the softmax's tree max
// and polynomial exp2, 2-CTA clusters with TMA multicast (35a8a04); Q's fragments in registers and
// the row sums on the tensor core are patches in bench/results/2026-12-03-s19/; three consumer
// warpgroups with a 192-row q tile (80344c4) and half tiles on the causal diagonal (4074517)).
#pragma once

// TMA_STORE: the epilogue writes O into the V stage its last P V read and stores it with TMA
// (off: from registers with 4-byte stores, which ncu showed throttling the load/store queue).
#ifndef MLAKIT_SM90_TMA_STORE
#define MLAKIT_SM90_TMA_STORE 1
#endif
// Q_PER_BOX: Q's three 64-column boxes complete on their own mbarriers, and an item's first
// S = Q K^T issues each box's k-steps as soon as that box has landed.
#ifndef MLAKIT_SM90_Q_PER_BOX
#define MLAKIT_SM90_Q_PER_BOX 0
#endif
// DECOUPLED: the two consumer warpgroups meet nowhere at an item's end. Each takes items through
// its own hand-over barriers, has its own half of Q (64 rows, its own full / empty mbarriers, so
// the producer refills it once this warpgroup's last S has read it), stages its output in its own
// 8 KB of shared memory (one 64-column box at a time) instead of the V stage both read, and the
// V rows past a sequence are cleared by the first warpgroup alone, which tells the second through
// one mbarrier per V stage. So the leading warpgroup starts its next item (its first S on the
// tensor cores) while the other finishes this one's last tile, instead of waiting for it at the
// hand-over and the output staging (the ~0.8 us per item the trace builds showed between them).
// Only the K/V ring (both read every tile) still couples them, within one tile.
// Measured on the H200 with CLAIM_AT_LAST_K (docs/perf-notes.md, session 26): 1x999 +5%, ctx
// 799/200 +7%, 100x999 +2.3%, 8x999+200 +1.7%, long work +0.2-1%. 0 restores the kernel before.
#ifndef MLAKIT_SM90_DECOUPLED
#define MLAKIT_SM90_DECOUPLED 1
#endif
// CLAIM_AT_LAST_K: the producer asks the scheduler for the next item once it has issued the
// current item's last K load instead of its last V load (one kv tile earlier), so the claim, the
// decode and the two slot round trips are further under the item's last tiles.
// With DECOUPLED: +1.7-2.3% on the ragged batches over DECOUPLED alone (session 26).
#ifndef MLAKIT_SM90_CLAIM_AT_LAST_K
#define MLAKIT_SM90_CLAIM_AT_LAST_K 1
#endif
// DEPHASE_FIRST_ONLY: the dephase below only at a block's first item (the default with
// DECOUPLED, whose warpgroups otherwise drift apart by themselves).
#ifndef MLAKIT_SM90_DEPHASE_FIRST_ONLY
#define MLAKIT_SM90_DEPHASE_FIRST_ONLY MLAKIT_SM90_DECOUPLED
#endif
// DEPHASE_NS: the second consumer warpgroup sleeps this long (__nanosleep: 0 to 2x) at each
// item start before its first S, so the two warpgroups' first S products queue one after the
// other instead of interleaving and the first warpgroup's softmax starts while the second's S
// runs. Measured on the H200 (docs/perf-notes.md, 2026-12-03 sixth session): +2-3% on the ragged
// batches of 999-token sequences (100x999 476-479 -> 488 TFLOP/s), long work within its spread.
// 0 turns it off.
#ifndef MLAKIT_SM90_DEPHASE_NS
#define MLAKIT_SM90_DEPHASE_NS 150
#endif
// Measurement only (wrong results; they bound what hiding a cost could gain): EXP_Q_ONCE loads
// Q for a block's first item only; EXP_NO_STORE skips the epilogue's stores.
#ifndef MLAKIT_SM90_EXP_Q_ONCE
#define MLAKIT_SM90_EXP_Q_ONCE 0
#endif
#ifndef MLAKIT_SM90_EXP_NO_STORE
#define MLAKIT_SM90_EXP_NO_STORE 0
#endif
// EXP_KV: 1 loads every K/V tile of an item from its first kv tile (an L2-resident working set:
// same bytes through L2, almost no DRAM); 2 loads no K/V at all (the producer completes the full
// barriers by a plain arrive: no L2 traffic, shared memory holds stale tiles). EXP_NO_SOFTMAX
// packs the raw scores as P (no max, exponentials or sums). Together they split the kv tile's
// ~2990 cycles (against 2560 of tensor work) between loads, softmax and the matrix pipe. 4 loads
// every other kv tile only (half the L2 -> shared bytes: bounds what 2-CTA clusters sharing K/V
// tiles by TMA multicast could gain).
#ifndef MLAKIT_SM90_EXP_KV
#define MLAKIT_SM90_EXP_KV 0
#endif
#ifndef MLAKIT_SM90_EXP_NO_SOFTMAX
#define MLAKIT_SM90_EXP_NO_SOFTMAX 0
#endif
// EXP_NO_CAP: the soft-capped softmax variants compiled out (a soft cap is then ignored: wrong
// results with one). The consumer without them is 4.3k SASS instructions against 7.4k: measures
// what the consumer's code size costs the uncapped workloads.
#if MLAKIT_SM90_DECOUPLED && (MLAKIT_SM90_Q_PER_BOX || MLAKIT_SM90_EXP_Q_ONCE)
#error "MLAKIT_SM90_DECOUPLED loads Q per warpgroup half: not with Q_PER_BOX or EXP_Q_ONCE"
#endif
#ifndef MLAKIT_SM90_EXP_NO_CAP
#define MLAKIT_SM90_EXP_NO_CAP 0
#endif
