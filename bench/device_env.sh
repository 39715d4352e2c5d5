# Sourced by the one-off device scripts in bench/results/*/ (bash, from the repository root), so
# each does not repeat the same setup: a timer, the Python binding, FlashInfer, PYTHONPATH.
#
#   source bench/device_env.sh [binding] [flashinfer]
#
#   (always)    el MESSAGE   prints "[N s] MESSAGE", seconds since sourcing
#   binding     builds the binding into build-py (Release, CUDA on, 90a; skipped when
#               build-py/python already holds it), log in /tmp/device_env_pybuild.txt
#   flashinfer  `FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh` (the offline
#               copy, carried: carry [".peers"]), log in /tmp/device_env_fi.txt
# PYTHONPATH gets build-py/python and python/ in front when `binding` is asked for.
# MLAKIT_GIT_COMMIT (what bench/run_record.py records as the commit) is set from carry1/COMMIT
# when that file exists: the device copy's .git can name an older HEAD than the files it runs.
# Nothing here exits the calling script: a failed step prints the tail of its log and goes on, so
# the script's later steps (and what they leave in $OUT) still run.
DEVICE_ENV_T0=$(date +%s)
el() { echo "[$(( $(date +%s) - DEVICE_ENV_T0 )) s] $*"; }
if [ -z "${MLAKIT_GIT_COMMIT:-}" ] && [ -s carry1/COMMIT ]; then
  export MLAKIT_GIT_COMMIT=$(tr -d '[:space:]' < carry1/COMMIT)
fi
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
      el "flashinfer" ;;
    *) echo "device_env.sh: unknown step '$device_env_step' (binding, flashinfer)" ;;
  esac
done
unset device_env_step
