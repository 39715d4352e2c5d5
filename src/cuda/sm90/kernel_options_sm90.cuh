// Build options of the sm90 kernel: pipeline variants still under measurement and
// measurement-only builds (docs/perf-notes.md has each one's prediction and outcome). Defaults
// are what ships. Variants that lost were removed once measured (perf-notes names them and the
// commits that hold them: ping-pong, softmax after P V, K not ahead of V, late rescale, K first,
// L2 prefetch of Q and K/V, tensor maps from the parameters, the global tile order, the early
// claim, the cross-item consumer, the epilogue under the next item's first S, tile 1's S under
// tile 0's softmax, the skipped rescale, the stale-max rescale threshold, the softmax's tree max
// and polynomial exp2, 2-CTA clusters with TMA multicast (35a8a04); Q's fragments in registers and
// the row sums on the tensor core are patches in bench/results/2026-12-03-s19/; three consumer
// warpgroups with a 192-row q tile (80344c4) and half tiles on the causal diagonal (4074517);
// Q in boxes completing one by one and the Q-once oracle (in git before the v19 cleanup); the
// consumer warpgroups meeting at each item's end and claiming the next item at the last V load
// (the kernel before v19, 14e205b with MLAKIT_SM90_DECOUPLED=0 / CLAIM_AT_LAST_K=0); claiming one
// or two K loads earlier than the last (session 26, level); ping-pong issue turns again on v19
// (4875aa4, session 27: -1.7 to -3.1% on every workload but the context chunk), and at (128, 128)
// only (session 34, bench/results/2026-12-04-s34/call2_d128_pingpong/pingpong_d128.patch: level
// to -1.5%, H=128 8192 -6%)).
#pragma once

// TMA_STORE: the epilogue stages each consumer warpgroup's O rows in its own shared-memory
// region and stores them with TMA (off: from registers with 4-byte stores, which ncu showed
// throttling the load/store queue).
#ifndef MLAKIT_SM90_TMA_STORE
#define MLAKIT_SM90_TMA_STORE 1
#endif
// DEPHASE_NS: at a block's first item the second consumer warpgroup sleeps this long
// (__nanosleep: 0 to 2x) before its first S, so the two warpgroups' first S products queue one
// after the other instead of interleaving and the first warpgroup's softmax starts while the
// second's S runs. Measured on the H200 (docs/perf-notes.md, 2026-12-03 sixth session, then at
// every item): +2-3% on the ragged batches of 999-token sequences. Since v19 the warpgroups do
// not meet at an item's end, so after the first item they stay apart by themselves (at every
// item the sleep measured 0.2-0.8% slower, session 26). 0 turns it off.
#ifndef MLAKIT_SM90_DEPHASE_NS
#define MLAKIT_SM90_DEPHASE_NS 150
#endif
// Measurement only (wrong results; they bound what hiding a cost could gain): EXP_NO_STORE skips
// the epilogue's stores.
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
#ifndef MLAKIT_SM90_EXP_NO_CAP
#define MLAKIT_SM90_EXP_NO_CAP 0
#endif
