#!/usr/bin/env python3
"""Peers that do not come with PyTorch: FlashInfer 0.7.2.post1 from the offline copy.

The copy (`shared/peers/flashinfer/`: wheels, the pruned package, sm90a modules prebuilt for
bf16 (192, 128)) sits on the GPU machine at `<repo>/.peers/flashinfer/` (git-ignored, carried
there by hand). Its README's setup is `FI_USE_PREBUILT=1 source DIR/setup_flashinfer.sh`: it
pip-installs the wheels offline into $FI_SITE (default /tmp/site), unpacks the package and the
prebuilt modules, and exports PYTHONPATH and FlashInfer's JIT cache location. This module runs
exactly that script in a bash subprocess and copies the environment it exports into this
process, so a plain `python3 bench/compare.py` finds FlashInfer without a wrapper shell.
(`scripts/gpu-check` sources the script itself before it starts Python: then the import below
succeeds at once and nothing is installed twice.)

    python3 bench/peers.py env      # install if needed; print the `export` lines
    python3 bench/peers.py smoke    # install if needed; run the copy's fi_smoke.py (both backends)

    sys.path.insert(0, "bench"); import peers
    fi, info = peers.load_flashinfer()   # (module, "where from") or (None, "why not")

Where the copy is looked for: $MLAKIT_FI_DIR, <repo>/.peers/flashinfer, <repo>/shared/peers/
flashinfer, <repo>/../shared/peers/flashinfer. FlashInfer's LSE is base 2 (lse2 = lse / ln 2).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LN2 = 0.6931471805599453


def offline_peer_dir(name, env_var):
    """The folder of a peer's offline copy (it holds setup_<name>.sh): $env_var, else .peers/<name>,
    shared/peers/<name> in or beside the repository; None when there is none."""
    cands = [os.environ.get(env_var), os.path.join(REPO, ".peers", name), os.path.join(REPO, "shared", "peers", name),
             os.path.join(os.path.dirname(REPO), "shared", "peers", name)]
    for c in cands:
        if c and os.path.isfile(os.path.join(c, f"setup_{name}.sh")):
            return os.path.abspath(c)
    return None


def flashinfer_dir():
    """The offline FlashInfer copy's folder (it holds setup_flashinfer.sh), or None."""
    return offline_peer_dir("flashinfer", "MLAKIT_FI_DIR")


def _env_after(script, extra_env, quiet=True):
    """The environment after `source script` in bash (its output goes to our stderr unless
    quiet), as a dict; raises RuntimeError with the script's output when it fails."""
    env = dict(os.environ)
    env.update(extra_env)
    proc = subprocess.run(["bash", "-c", 'source "$1" >&2 && env -0', "bash", script], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"`source {script}` failed (exit {proc.returncode}):\n{err.strip()}")
    if not quiet and err.strip():
        sys.stderr.write(err)
    out = {}
    for item in proc.stdout.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            out[k.decode()] = v.decode(errors="replace")
    return out


def setup_flashinfer(prebuilt=True, site=None, quiet=True):
    """Installs the offline copy as its README says (idempotent) and applies the exported
    environment to this process. Returns the site dir. Raises RuntimeError on failure."""
    d = flashinfer_dir()
    if d is None:
        raise RuntimeError("no offline FlashInfer copy (.peers/flashinfer with setup_flashinfer.sh; "
                           "or set MLAKIT_FI_DIR)")
    site = site or os.environ.get("FI_SITE", "/tmp/site")
    env_file = os.path.join(site, "flashinfer_env.sh")
    installed = (os.path.isfile(env_file) and os.path.isfile(os.path.join(site, "flashinfer", "__init__.py"))
                 and (not prebuilt or os.path.isdir(os.path.join(site, "flashinfer", "data", "aot"))))
    extra = {"FI_SITE": site}
    if prebuilt:
        extra["FI_USE_PREBUILT"] = "1"
    # Already installed into this site: only its exports (a second install costs seconds).
    new_env = _env_after(env_file if installed else os.path.join(d, "setup_flashinfer.sh"), extra, quiet)
    for k, v in new_env.items():
        if os.environ.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD"):
            os.environ[k] = v
    for p in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if p and p not in sys.path:
            sys.path.insert(0, p)
    return site


def load_flashinfer(auto_setup=True, prebuilt=True, quiet=True):
    """(flashinfer module, description) or (None, reason). Imports what is importable already
    (gpu-check sources the setup first); otherwise installs the offline copy when auto_setup."""
    first_err = None
    try:
        import flashinfer  # noqa: F401
        import flashinfer.prefill  # noqa: F401
        return flashinfer, f"flashinfer {flashinfer.__version__} from {os.path.dirname(flashinfer.__file__)}"
    except Exception as ex:  # noqa: BLE001
        first_err = ex
    if not auto_setup:
        return None, f"flashinfer not importable ({first_err!r}); setup disabled"
    try:
        site = setup_flashinfer(prebuilt=prebuilt, quiet=quiet)
    except Exception as ex:  # noqa: BLE001
        return None, f"flashinfer not importable ({first_err!r}) and the offline setup failed: {ex}"
    for name in [m for m in sys.modules if m == "flashinfer" or m.startswith("flashinfer.")]:
        del sys.modules[name]  # a failed partial import must not shadow the fresh one
    try:
        import flashinfer  # noqa: F811
        import flashinfer.prefill  # noqa: F401
        return flashinfer, (f"flashinfer {flashinfer.__version__} from {os.path.dirname(flashinfer.__file__)} "
                            f"(installed into {site} from {flashinfer_dir()}"
                            f"{', prebuilt sm90a modules' if prebuilt else ''})")
    except Exception as ex:  # noqa: BLE001
        return None, f"flashinfer installed into {site} but the import failed: {ex!r}"


def main(argv):
    cmd = argv[1] if len(argv) > 1 else "env"
    prebuilt = os.environ.get("FI_USE_PREBUILT", "1") == "1"
    if cmd not in ("env", "smoke"):
        print(__doc__)
        return 2
    try:
        site = setup_flashinfer(prebuilt=prebuilt, quiet=False)
    except Exception as ex:  # noqa: BLE001
        print(f"peers.py: {ex}", file=sys.stderr)
        return 1
    if cmd == "env":
        for k in ("PYTHONPATH", "FLASHINFER_WORKSPACE_BASE", "CUDA_HOME", "PATH", "FLASHINFER_CUDA_ARCH_LIST",
                  "TVM_FFI_CACHE_DIR"):
            if k in os.environ:
                print(f"export {k}={shlex.quote(os.environ[k])}")
        print(f"# FlashInfer installed into {site}", file=sys.stderr)
        return 0
    smoke = os.path.join(flashinfer_dir(), "fi_smoke.py")
    return subprocess.call([sys.executable, smoke] + argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
