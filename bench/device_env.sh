# Sourced by the one-off device scripts in bench/results/*/ (bash, from the repository root), so
# each does not repeat the same setup: a timer, the Python binding, FlashInfer, PYTHONPATH.
#
#   source bench/device_env.sh [binding] [flashinfer]
#
#   (always)    el MESSAGE   prints "[N s] MESSAGE", seconds since sourcing
#   binding     builds the binding into build-py (Release, CUDA on, 90a; skipped when
#               build-py/python already holds it), log in /tmp/device_env_pybuild.txt
#   flashinfer  `FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh` (the offline
#               copy, carried: carry [".peers"]), log in /tmp/device_env_fi.txt, its version and
#               error lines printed
# PYTHONPATH gets build-py/python and python/ in front when `binding` is asked for.
# MLAKIT_GIT_COMMIT (what bench/run_record.py records as the commit) is set from carry1/COMMIT
# when that file exists: the device copy's .git can name an older HEAD than the files it runs.
# Nothing here exits the calling script: a failed step prints the tail of its log and goes on, so
# the script's later steps (and what they leave in $OUT) still run.
#
# Functions for the scripts' recurring blocks (defined whatever steps are asked for):
#   ab_rounds FILE ROUNDS BIN... [-- ARGS...]
#               an A/B of mlakit-bench binaries: ROUNDS rounds, each running every BIN once in its
#               own process (so a drift of the host or the clock hits every build alike), with
#               `--kernel sm90 --all --iters 20 --warmup-ms 0 --no-check` unless ARGS are given;
#               rows "<bin name> r<round> <bench row>" in FILE, then per workload one line per
#               build with its TFLOP/s over the rounds, sorted
#   record DIR  the numbers of record beside the peers (scripts/gpu-check's flashinfer and
#               compare steps on the binding in build-py; needs `binding` and a carried .peers),
#               summary in DIR/summary.txt
#   mla_record DIR [ARGS...]
#               bench/compare_mla.py ARGS (cases, paths) into DIR: compare_mla.log and
#               compare_mla.json.gz; prints its exit status and the per-path totals and target lines
DEVICE_ENV_T0=$(date +%s)
el() { echo "[$(( $(date +%s) - DEVICE_ENV_T0 )) s] $*"; }
if [ -z "${MLAKIT_GIT_COMMIT:-}" ] && [ -s carry1/COMMIT ]; then
  export MLAKIT_GIT_COMMIT=$(tr -d '[:space:]' < carry1/COMMIT)
fi
ab_rounds() {
  local file=$1 rounds=$2 bins=() args=() r b
  shift 2
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do bins+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  args=("$@")
  [ ${#args[@]} -eq 0 ] && args=(--kernel sm90 --all --iters 20 --warmup-ms 0 --no-check)
  for r in $(seq 1 "$rounds"); do
    for b in "${bins[@]}"; do
      timeout 120 "$b" "${args[@]}" 2>&1 | grep "cuda:0/" | awk -v b="$(basename "$b")" -v r=$r '{print b, "r" r, $0}'
    done
  done > "$file"
  # Column 8 of a row is the bench table's TFLOP/s (name, round, workload, device, batch, q/kv, ms, TFLOP/s).
  for w in $(awk '{print $3}' "$file" | sort -u); do
    for b in "${bins[@]}"; do
      b=$(basename "$b")
      # awk compares the fields as strings: workload names hold regex characters ("[dqk128,dvo128]").
      echo "$w $b $(awk -v b="$b" -v w="$w" '$1 == b && $3 == w {print $8}' "$file" | sort -n | tr '\n' ' ')"
    done
  done
}
record() {
  local dir=$1
  MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
    timeout 200 scripts/gpu-check "$dir" > /tmp/device_env_record.txt 2>&1; echo "record (gpu-check) rc=$?"
  rm -f "$dir/tests.log" "$dir/build.log"
  grep -E '^\s+compare ' "$dir/summary.txt"
  sed -n '/^| workload | mlakit ms/,/^$/p' "$dir/summary.txt"
}
mla_record() {
  local dir=$1 rc
  shift
  mkdir -p "$dir"
  timeout "${MLA_RECORD_TIMEOUT:-240}" python3 bench/compare_mla.py --json "$dir/compare_mla.json" "$@" \
    > "$dir/compare_mla.log" 2>&1
  rc=$?
  echo "compare_mla rc=$rc"
  grep -E ": met|: MISSED|total .* ms wall" "$dir/compare_mla.log" | tail -24
  [ -f "$dir/compare_mla.json" ] && gzip -f "$dir/compare_mla.json"
  return 0
}
for device_env_step in "$@"; do
  case "$device_env_step" in
    binding)
      if ! ls build-py/python/_mlakit*.so > /dev/null 2>&1; then
        timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON \
          -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON \
          -DPython_EXECUTABLE=$(command -v python3) > /tmp/device_env_pybuild.txt 2>&1 && \
          cmake --build build-py -j$(nproc) >> /tmp/device_env_pybuild.txt 2>&1" || tail -5 /tmp/device_env_pybuild.txt
      fi
      export PYTHONPATH=$PWD/build-py/python:$PWD/python:${PYTHONPATH:-}
      el "binding" ;;
    flashinfer)
      FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/device_env_fi.txt 2>&1 \
        || tail -3 /tmp/device_env_fi.txt
      # What the record scripts of sessions 32-34 grepped after sourcing this: a version line, or
      # any error the setup printed although it returned 0.
      grep -m2 -iE "flashinfer.*(ok|version)|error" /tmp/device_env_fi.txt || true  # no line: nothing to say
      el "flashinfer" ;;
    *) echo "device_env.sh: unknown step '$device_env_step' (binding, flashinfer)" ;;
  esac
done
unset device_env_step
