#!/bin/bash
# Device call 4 of session 21: what state makes an H=128 1x8192 launch slow. Call 3: in every
# process most launches take 4.35 ms and a few 3.75-3.80 (min), while ncu (L2 flushed before the
# launch, clocks not locked) timed 3.83 ms in all six processes; the SM clock in the timed loops
# was 1.53-1.55 GHz (nvidia-smi), ncu's 1.59. mlakit-bench's new probes (outside the timed
# samples): --gap-ms X sleeps on the host, --l2-flush-mb N writes an N MiB buffer; the JSON lists
# every sample. v15's kernel (carry4/COMMIT); carry4/mlakit-bench.
# Run from the repository root with carry ["carry4"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=carry4
export MLAKIT_GIT_COMMIT=$(cat $C/COMMIT)
summ() { python3 -c "
import json,sys
r=[x for x in json.load(open('$1'))['results'] if 'ms' in x]
for x in r:
  s=x['sample_ms']; good=sum(1 for v in s if v < 0.93*x['ms']) if x['workload']=='v3_128h_8192' else -1
  print('%-20s median %.3f min %.3f mean %.3f  samples: %s' % (x['workload'], x['ms'], x['ms_min'], x['ms_mean'], ' '.join('%.2f'%v for v in s)))
"; }
for mode in "plain:" "gap5:--gap-ms 5" "flush256:--l2-flush-mb 256" "gap5flush:--gap-ms 5 --l2-flush-mb 256" "gap50:--gap-ms 50"; do
  n=${mode%%:*}; opt=${mode#*:}
  for k in 1 2; do
    echo "== $n process $k"
    timeout 40 $C/mlakit-bench --kernel sm90 --workload v3_128h_8192 --iters 40 --no-check $opt --json /tmp/$n$k.json 2>&1 | grep -E "rror"
    summ /tmp/$n$k.json
  done
done > $OUT/h128_state.txt 2>&1
cat $OUT/h128_state.txt; el h128
WL="--workload 1x32768 --workload ctx_8x1024_vs_4096 --workload 1x16384 --workload 100x999 --workload 8x999+200"
for mode in "plain:" "flush256:--l2-flush-mb 256"; do
  n=${mode%%:*}; opt=${mode#*:}
  echo "== others $n"
  timeout 90 $C/mlakit-bench --kernel sm90 $WL --iters 20 --no-check $opt --json /tmp/o$n.json 2>&1 | grep -E "cuda:0/|rror"
  summ /tmp/o$n.json | cut -c1-80
done > $OUT/others_state.txt 2>&1
cat $OUT/others_state.txt; el others
