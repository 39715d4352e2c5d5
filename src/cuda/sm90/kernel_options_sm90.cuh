// Build options of the sm90 kernel: pipeline-order variants measured against each other and
// measurement-only builds (docs/perf-notes.md has each one's outcome). Defaults are what ships.
#pragma once

// K_AHEAD: the producer loads K one tile ahead of V; RESCALE_EARLY: O is rescaled while S runs.
#ifndef MLAKIT_SM90_K_AHEAD
#define MLAKIT_SM90_K_AHEAD 1
#endif
#ifndef MLAKIT_SM90_RESCALE_EARLY
#define MLAKIT_SM90_RESCALE_EARLY 1
#endif
// PINGPONG: the two consumer warpgroups take turns issuing their matrix products (a pair of named
// barriers passes the turn), so one's softmax runs while the other's products keep the tensor
// cores busy. SOFTMAX_AFTER_PV: the softmax of S_t waits for P_{t-1} V_{t-1} as well.
#ifndef MLAKIT_SM90_PINGPONG
#define MLAKIT_SM90_PINGPONG 0
#endif
#ifndef MLAKIT_SM90_SOFTMAX_AFTER_PV
#define MLAKIT_SM90_SOFTMAX_AFTER_PV 0
#endif
// K0_FIRST: the producer issues an item's first K tile before it waits for the Q buffer (the K
// stage frees a step earlier than Q does).
#ifndef MLAKIT_SM90_K0_FIRST
#define MLAKIT_SM90_K0_FIRST 0
#endif
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
// PREFETCH_Q: the producer prefetches an item's Q tile into L2 as soon as it takes the item from
// the scheduler (about one item before the single Q buffer frees), so the load that follows the
// previous item's last S finds it in L2 instead of device memory (each Q tile is read once, so
// it is never in L2 otherwise). PREFETCH_KV = N > 0: K and V tiles are prefetched into L2 N tiles
// ahead of their loads (the ring holds two).
#ifndef MLAKIT_SM90_PREFETCH_Q
#define MLAKIT_SM90_PREFETCH_Q 0
#endif
#ifndef MLAKIT_SM90_PREFETCH_KV
#define MLAKIT_SM90_PREFETCH_KV 0
#endif
// TILE_ORDER: the plan's global longest-first tile list (ScheduleKind::kTilesLongestFirst, heads
// innermost, as the sm80 kernel walks it) instead of the per-sequence runs; no key-range split.
#ifndef MLAKIT_SM90_TILE_ORDER
#define MLAKIT_SM90_TILE_ORDER 0
#endif
// LATE_CLAIM: the scheduler warp claims a block's next item from the global counter only once the
// producer has issued the current item's last load (off: one whole item ahead, so every block held
// two items from the start and the plan's longest-first order broke across blocks):
// work_handover_sm90.cuh. Measured on: 2x999 +25-30%, 8x999+200 +9%, 100x999 +1%, long work
// within noise (docs/perf-notes.md, session of 2026-12-03, third).
#ifndef MLAKIT_SM90_LATE_CLAIM
#define MLAKIT_SM90_LATE_CLAIM 1
#endif
// EPI_UNDER_NEXT_S: an item's TMA-store epilogue (O staging barrier, stmatrix, store) waits until
// the next item's first S = Q K^T is issued and runs while it computes, instead of leaving the
// tensor cores idle between items (~0.8 us per item in the block timelines).
#ifndef MLAKIT_SM90_EPI_UNDER_NEXT_S
#define MLAKIT_SM90_EPI_UNDER_NEXT_S 0
#endif
// Measurement only (wrong results; they bound what hiding a cost could gain): EXP_Q_ONCE loads
// Q for a block's first item only; EXP_NO_STORE skips the epilogue's stores.
#ifndef MLAKIT_SM90_EXP_Q_ONCE
#define MLAKIT_SM90_EXP_Q_ONCE 0
#endif
// EXP_PARAM_MAPS: TMA reads the tensor maps from the kernel parameters as the host encoded them
// (the views' extents, no per-block rewrite to the plan's totals, no publish / acquire fences);
// right only when the views hold exactly the plan's rows, as mlakit-bench's do. It bounds what the
// per-block rewrite costs a launch.
#ifndef MLAKIT_SM90_EXP_PARAM_MAPS
#define MLAKIT_SM90_EXP_PARAM_MAPS 0
#endif
#ifndef MLAKIT_SM90_EXP_NO_STORE
#define MLAKIT_SM90_EXP_NO_STORE 0
#endif
