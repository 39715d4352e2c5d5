import os
import sys
import zlib

import pytest

# Let the tests run from a source checkout without installing: python/ on sys.path (the package),
# plus the plain-CMake build dir named by MLAKIT_BUILD_DIR (where _mlakit lands).
_here = os.path.dirname(os.path.abspath(__file__))
_build = os.environ.get("MLAKIT_BUILD_DIR")
if _build:
    sys.path.insert(0, os.path.join(os.path.abspath(_build), "python"))
    sys.path.insert(0, os.path.dirname(_here))


@pytest.fixture
def rng(request):
    import numpy as np

    # Stable per-test seed (hash() is salted per process), so a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
