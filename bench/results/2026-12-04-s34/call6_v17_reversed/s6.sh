#!/bin/bash
# Session 34 call 6: call 5's A/B with the builds in the other order in every round (v17 first):
# session 33 saw a build read up to +1.4% from being second in each round. Two rounds at each dims.
# carry ["carry1"].
set -u
source bench/device_env.sh
ab_rounds $OUT/ab_d128_rev.txt 2 carry1/ab/v17 carry1/ab/base -- --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check --dqk 128 --dvo 128
el ab128
ab_rounds $OUT/ab_d192_rev.txt 2 carry1/ab/v17 carry1/ab/base
el ab192
