#!/bin/bash
# Prepared for the next session (this one's device time ran out): validate mlakit-bench's
# --warmup-ms (dfb400d) on the two power-capped workloads. Prediction: with --warmup-ms 200 every
# sample of H=128 1x8192 falls in the capped regime (4.0-4.4 ms, call 4's later samples), so the
# medians of three processes agree within ~2% and the min is within ~3% of the median; without it
# (the default) the first samples are 3.70-3.73 ms and the min is ~15% under the median. 1x32768
# (16.6 ms launches) is capped either way: medians equal with and without.
# Build here: a 90a build of dfb400d or later; copy mlakit-bench (stripped) into carryN/, the
# commit into carryN/COMMIT. Run from the repository root with carry ["carryN"].
set -u
C=${CARRY:-carry7}
export MLAKIT_GIT_COMMIT=$(cat $C/COMMIT)
for wu in 0 200; do
  for k in 1 2 3; do
    for w in v3_128h_8192 1x32768; do
      echo "== $w warmup-ms $wu process $k"
      timeout 60 $C/mlakit-bench --kernel sm90 --workload $w --iters 20 --no-check --warmup-ms $wu --json /tmp/r.json 2>&1 | grep -E "rror"
      python3 -c "
import json; r=[x for x in json.load(open('/tmp/r.json'))['results'] if 'ms' in x][0]
print('median %.3f min %.3f warmup launches %d samples %s' % (r['ms'], r['ms_min'], r['warmup_launches'], ' '.join('%.2f' % v for v in r['sample_ms'])))"
    done
  done
done > $OUT/warmup_ms.txt 2>&1
cat $OUT/warmup_ms.txt
