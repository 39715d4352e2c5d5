#!/bin/bash
# Session 27, call 7: the whole Python test suite on the H200 at 3b3abfc with the CUDA binding
# (torch 2.11 there): the GPU tests drive MlaStep.plan with torch block tables, which the
# extension now reads itself (exchange_host_ints), and CUDA graphs replayed after re-planning.
set -u
source bench/device_env.sh binding
MLAKIT_BUILD_DIR=build-py timeout 300 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1; echo "pytest rc=$?"
tail -8 $OUT/pytest.log
el done
