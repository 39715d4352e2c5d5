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
// Measurement only (wrong results; they bound what hiding a cost could gain): EXP_Q_ONCE loads
// Q for a block's first item only; EXP_NO_STORE skips the epilogue's stores.
#ifndef MLAKIT_SM90_EXP_Q_ONCE
#define MLAKIT_SM90_EXP_Q_ONCE 0
#endif
#ifndef MLAKIT_SM90_EXP_NO_STORE
#define MLAKIT_SM90_EXP_NO_STORE 0
#endif
