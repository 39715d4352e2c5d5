"""What bench/compare.py and bench/compare_mla.py write beside their numbers: the commit they ran
at, a digest of the source tree that ran, and JSON without inf/nan.

    python3 bench/run_record.py                  # prints this checkout's source digest and HEAD
    python3 bench/run_record.py --digest-only    # the digest alone (what mlakit-bench embeds)

A device machine's copy may carry a stale .git (its HEAD names an older commit than the files it
runs), so results also record `source_digest`: a hash of the files that build and drive the
library, read from disk. Checking out a commit and running this script prints the digest that
commit's results must show.
"""
from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys

# What decides the numbers: the library, its kernels, the binding, the benchmark harness.
DIGEST_DIRS = ("include", "src", "python/mlakit", "tools", "bench")
DIGEST_FILES = ("CMakeLists.txt",)
DIGEST_SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".py", ".txt", ".cmake")

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


def source_digest(root=REPO):
    """First 16 hex digits of a SHA-256 over the relative path and bytes of every source file
    under DIGEST_DIRS (suffixes DIGEST_SUFFIXES, build outputs and results left out) and
    DIGEST_FILES, in sorted order; "unknown" if none is found."""
    paths = [f for f in DIGEST_FILES if os.path.isfile(os.path.join(root, f))]
    for d in DIGEST_DIRS:
        top = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(x for x in dirnames if x not in ("results", "__pycache__") and not x.startswith("."))
            for fn in filenames:
                if fn.endswith(DIGEST_SUFFIXES):
                    paths.append(os.path.relpath(os.path.join(dirpath, fn), root))
    if not paths:
        return "unknown"
    h = hashlib.sha256()
    for rel in sorted(p.replace(os.sep, "/") for p in paths):
        h.update(rel.encode() + b"\0")
        with open(os.path.join(root, rel), "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()[:16]


def finite_or_none(o):
    """JSON has no inf/nan: replace them (recursively) with null; keys become strings."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {str(k): finite_or_none(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite_or_none(v) for v in o]
    return o


def main(argv):
    args = [a for a in argv if a != "--digest-only"]
    root = args[0] if args else REPO
    if "--digest-only" in argv:
        print(source_digest(root))
    else:
        print(f"source_digest {source_digest(root)}  git HEAD {git_commit()}")


if __name__ == "__main__":
    main(sys.argv[1:])
