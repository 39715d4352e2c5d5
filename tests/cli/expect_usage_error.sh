#!/usr/bin/env bash
# expect_usage_error.sh BIN PATTERN ARGS...: BIN ARGS must exit with 2 (usage error) before
# running anything, and its stderr must contain PATTERN (an extended regex). Used by CTest for
# mlakit-bench's argument checks.
set -u
bin=$1 pattern=$2
shift 2
err=$("$bin" "$@" 2>&1 >/dev/null)
rc=$?
if [[ $rc -ne 2 ]]; then
  echo "FAIL: '$bin $*' exited $rc, expected 2 (usage error); stderr: $err"
  exit 1
fi
if ! grep -Eq -- "$pattern" <<<"$err"; then
  echo "FAIL: '$bin $*' stderr does not match /$pattern/: $err"
  exit 1
fi
echo "ok: '$*' -> $err"
