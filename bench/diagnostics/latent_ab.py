#!/usr/bin/env python3
"""Builds of mlakit's Python extension timed in turns on bench/compare_latent.py's workloads:
which build of the latent kernel is faster, side by side on one GPU.

A build is a directory holding the `_mlakit` extension file (a CMake build dir's `python/`, or
a folder with a copy of the file; not an installed `mlakit` package's folder, whose modules would
shadow top-level ones such as `torch`). Each round runs `compare_latent.py --methods mlakit` once per build, each in its own
process with that directory first on PYTHONPATH; every other round takes the builds in the
reverse order, so that drift over the call (clocks, heat) falls on each build alike. The table
gives, per workload, each build's median time over the rounds, its ratio to the first build's,
and FAIL where a run did not pass the benchmark's reference check (or did not run).

    python3 bench/diagnostics/latent_ab.py --build base=carry/base/python \\
        --build new=carry/new/python --rounds 2 --workload decode_h128 --workload mtp4_h128

Arguments it does not know go to compare_latent.py as they are (e.g. `--device cpu --smoke`).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COMPARE = os.path.join(ROOT, "bench", "compare_latent.py")


def schedule(names, rounds):
    """[(round, build)]: the builds in order in even rounds, reversed in odd ones."""
    order = []
    for r in range(rounds):
        order += [(r, n) for n in (names if r % 2 == 0 else list(reversed(names)))]
    return order


def parse_cases(doc):
    """{workload: (ms or None, passed)} of the mlakit method in a compare_latent.py JSON."""
    out = {}
    for case in doc.get("cases", []):
        res = case.get("results", {}).get("mlakit", {})
        ms = res.get("ms")
        out[case["workload"]] = (ms, ms is not None and res.get("check") == "PASS")
    return out


def run_json(cmd, env, timeout, what, path):
    """Runs cmd (which writes a JSON file at `path`) and returns the file's document, or None
    with the reason on stderr when it ran past `timeout` seconds or wrote nothing."""
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout,
                              check=False, text=True)
    except subprocess.TimeoutExpired:
        print(f"{what} ran past {timeout:.0f} s", file=sys.stderr)
        return None
    if not os.path.exists(path):
        tail = "\n".join(proc.stderr.strip().splitlines()[-3:])
        print(f"{what} wrote no results (exit {proc.returncode}):\n{tail}", file=sys.stderr)
        return None
    with open(path) as f:
        return json.load(f)


def pythonpath_first(build_dir):
    """This process's environment with `build_dir` (the extension) and the repo's python/ first on
    PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.abspath(build_dir), os.path.join(ROOT, "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_once(build_dir, workloads, extra, timeout):
    """One compare_latent.py run of the mlakit method with `build_dir` first on PYTHONPATH."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        cmd = [sys.executable, COMPARE, "--methods", "mlakit", "--no-ceilings", "--no-peer-setup", "--json", path]
        for w in workloads:
            cmd += ["--workload", w]
        doc = run_json(cmd + list(extra), pythonpath_first(build_dir), timeout, f"{build_dir}: compare_latent.py", path)
        return {} if doc is None else parse_cases(doc)


def summarize(names, runs):
    """Rows (workload, [(build, median ms or None, ratio to the first build or None, all passed)]).
    `runs`: [(build, {workload: (ms, passed)})] in run order."""
    workloads = []
    for _, cases in runs:
        workloads += [w for w in cases if w not in workloads]
    rows = []
    for w in workloads:
        cells = []
        for n in names:
            got = [cases.get(w, (None, False)) for b, cases in runs if b == n]
            times = [ms for ms, _ in got if ms is not None]
            med = statistics.median(times) if times else None
            cells.append([n, med, None, bool(got) and all(ok for _, ok in got)])
        base = cells[0][1]
        for c in cells:
            c[2] = c[1] / base if c[1] is not None and base else None
        rows.append((w, [tuple(c) for c in cells]))
    return rows


def ab_main(argv, make_runner, description, workload_help, unit_of=lambda row: "ms", add_args=None):
    """The turns, table and JSON of an A/B: `make_runner(args)` (args: the parsed options, with
    those `add_args(parser)` adds) gives `runner(build_dir, workloads, extra, timeout)`, which
    returns {row: (value or None, passed)}; `unit_of(row)` names a row's unit. Shared by this
    tool and prefill_ab.py."""
    ap = argparse.ArgumentParser(description=description)
    if add_args is not None:
        add_args(ap)
    ap.add_argument("--build", action="append", required=True, metavar="NAME=DIR",
                    help="a build to time (the first is the baseline of the ratios)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workload", action="append", default=[], help=workload_help)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take")
    ap.add_argument("--json", default=None, help="write every run's times here")
    args, extra = ap.parse_known_args(argv)
    builds = {}
    for b in args.build:
        name, sep, path = b.partition("=")
        if not sep or not name or not path or name in builds:
            ap.error(f"--build {b!r}: want NAME=DIR with a new NAME")
        builds[name] = path
    names = list(builds)
    runner = make_runner(args)
    runs = []
    for r, n in schedule(names, args.rounds):
        cases = runner(builds[n], args.workload, extra, args.timeout)
        runs.append((n, cases))
        shown = " ".join(f"{w} {ms:.4f}" if ms is not None else f"{w} -" for w, (ms, _) in cases.items())
        print(f"round {r} {n}: {shown or 'no result'}", flush=True)
    rows = summarize(names, runs)
    print("| workload | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for w, cells in rows:
        shown = []
        for n, med, ratio, ok in cells:
            t = "-" if med is None else f"{med:.4f} {unit_of(w)}" + ("" if ratio is None else f" x{ratio:.3f}")
            shown.append(t + ("" if ok else " FAIL"))
        print(f"| {w} | " + " | ".join(shown) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"builds": builds, "runs": [{"build": n, "cases": c} for n, c in runs]}, f, indent=1)
    return 0 if all(ok for _, cells in rows for *_, ok in cells) and rows else 1


def main(argv=None, runner=run_once):
    return ab_main(argv, lambda args: runner, __doc__.splitlines()[0], "compare_latent.py workloads (default: its own)")


if __name__ == "__main__":
    sys.exit(main())
