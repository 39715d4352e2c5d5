#!/usr/bin/env python3
"""Builds of the prefill kernel timed in turns: which build is faster, back to back and
sustained under the power cap, side by side on one GPU.

A build is a build directory holding `mlakit-bench` and `python/` (the `_mlakit` extension), a
CMake build dir or a carried copy of those files. Each round runs, once per build and each in
its own process: `mlakit-bench --json` on the named workloads (--workload, default every named
one; reference-checked), then with --energy-workload `prefill_energy.py --methods mlakit` on
those workloads (--energy-seconds of back-to-back launches after --energy-rest idle, the build's
extension first on PYTHONPATH). Every other round takes the builds in the reverse order. The
table gives, per row, each build's median over the rounds and its ratio to the first build's:
`W` is mlakit-bench's ms a launch, `W sustained` prefill_energy.py's, `W energy` its joules a
launch; FAIL where a run failed its check or did not run.

    python3 bench/diagnostics/prefill_ab.py --build base=carry/base --build new=carry/new \\
        --rounds 3 --energy-workload 1x16384 --energy-workload v3_128h_8192

Arguments it does not know go to mlakit-bench as they are (e.g. `--iters 50`).
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ENERGY = os.path.join(HERE, "prefill_energy.py")
sys.path.insert(0, HERE)
import latent_ab  # noqa: E402  (the turns, the medians, the table and the runs in their own processes)


def parse_bench(doc):
    """{workload: (ms, passed)} of a mlakit-bench JSON (passed: it ran and its check passed)."""
    return {r["workload"]: (r.get("ms"), bool(r.get("ok")) and bool(r.get("pass", True)) and r.get("ms") is not None)
            for r in doc.get("results", [])}


def parse_energy(doc):
    """{"W sustained": (ms, True), "W energy": (J, True)} of a prefill_energy.py JSON's mlakit rows."""
    out = {}
    for r in doc.get("rows", []):
        if r.get("method") != "mlakit":
            continue
        out[f"{r['workload']} sustained"] = (r.get("ms"), r.get("ms") is not None)
        j = r.get("j_per_launch")
        out[f"{r['workload']} energy"] = (j, j is not None)
    return out


def unit_of(row):
    return "J" if row.endswith(" energy") else "ms"


def make_runner(energy_workloads, energy_seconds, energy_rest):
    def run_once(build_dir, workloads, extra, timeout):
        out = {}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.json")
            cmd = [os.path.join(build_dir, "mlakit-bench"), "--json", path]
            cmd += [a for w in workloads for a in ("--workload", w)] or ["--all"]
            doc = latent_ab.run_json(cmd + list(extra), dict(os.environ), timeout, f"{build_dir}: mlakit-bench", path)
            if doc is not None:
                out.update(parse_bench(doc))
            if energy_workloads:
                path = os.path.join(tmp, "energy.json")
                cmd = [sys.executable, ENERGY, "--methods", "mlakit", "--turns", "1", "--seconds", str(energy_seconds),
                       "--rest", str(energy_rest), "--json", path]
                cmd += [a for w in energy_workloads for a in ("--workload", w)]
                env = latent_ab.pythonpath_first(os.path.join(build_dir, "python"))
                doc = latent_ab.run_json(cmd, env, timeout, f"{build_dir}: prefill_energy.py", path)
                for w in energy_workloads:  # rows that did not come back read as failed
                    out[f"{w} sustained"] = out[f"{w} energy"] = (None, False)
                if doc is not None:
                    out.update(parse_energy(doc))
        return out
    return run_once


def add_energy_args(ap):
    ap.add_argument("--energy-workload", action="append", default=[],
                    help="also time this workload sustained with prefill_energy.py (repeatable)")
    ap.add_argument("--energy-seconds", type=float, default=3.0, help="each sustained window")
    ap.add_argument("--energy-rest", type=float, default=2.0, help="idle seconds before each window")


def main(argv=None, runner=None):
    def runner_for(args):
        return runner or make_runner(args.energy_workload, args.energy_seconds, args.energy_rest)

    return latent_ab.ab_main(argv, runner_for, __doc__.splitlines()[0],
                             "mlakit-bench's named workloads (default: --all)", unit_of, add_energy_args)


if __name__ == "__main__":
    sys.exit(main())
