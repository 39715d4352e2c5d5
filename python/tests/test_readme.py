"""The README's shell commands in order: a build directory is used (its binaries run, ctest in
it, cmake --install from it) only after a `cmake --build` of it. A new user runs them top to
bottom; "Building by hand" once ran build-cpu/mlakit-bench without building it."""

import os
import re

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def bash_lines():
    text = open(README, encoding="utf-8").read()
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                yield line


def test_every_build_dir_is_built_before_use():
    configured, built, problems = set(), set(), []
    for line in bash_lines():
        m = re.match(r"cmake -S \S+ -B (\S+)", line)
        if m:
            configured.add(m.group(1))
            continue
        m = re.match(r"cmake --build (\S+)", line)
        if m:
            if m.group(1) not in configured:
                problems.append(f"{line!r}: {m.group(1)} was never configured")
            built.add(m.group(1))
            continue
        used = set(re.findall(r"(?:^|[\s(])(build[\w-]*)/", line))          # build-cpu/mlakit-bench
        used |= set(re.findall(r"cd (build[\w-]*)\b", line))                 # (cd build && ctest)
        used |= set(re.findall(r"cmake --install (build[\w-]*)\b", line))
        problems += [f"{line!r}: {d} is used before `cmake --build {d}`" for d in sorted(used - built)]
    assert not problems, "\n".join(problems)
    assert {"build", "build-cpu"} <= built  # the block this guards is still there
