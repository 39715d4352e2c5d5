"""What bench/compare.py and bench/compare_mla.py write beside their numbers: the commit they ran
at, and JSON without inf/nan."""
from __future__ import annotations

import math
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit():
    """MLAKIT_GIT_COMMIT when set (a device machine's copy may carry a stale .git), else HEAD."""
    env = os.environ.get("MLAKIT_GIT_COMMIT")
    if env:
        return env
    try:
        return subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        return "unknown"


def finite_or_none(o):
    """JSON has no inf/nan: replace them (recursively) with null; keys become strings."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {str(k): finite_or_none(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite_or_none(v) for v in o]
    return o
