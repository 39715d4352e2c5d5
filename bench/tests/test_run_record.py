"""bench/run_record.py (no GPU): the source digest results record beside the commit."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import run_record  # noqa: E402


def make_tree(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_digest_follows_source_bytes_not_results_or_builds(tmp_path):
    make_tree(tmp_path, {"src/a.cc": "int a;", "include/mlakit/x.h": "#pragma once",
                         "bench/compare.py": "x = 1", "CMakeLists.txt": "project(x)"})
    d0 = run_record.source_digest(str(tmp_path))
    assert len(d0) == 16 and d0 == run_record.source_digest(str(tmp_path))
    # Results, caches and files of other kinds do not count.
    make_tree(tmp_path, {"bench/results/r.txt": "numbers", "src/__pycache__/a.py": "",
                         "src/notes.md": "prose", "src/a.o": "obj"})
    assert run_record.source_digest(str(tmp_path)) == d0
    # A changed byte in a source file, or a new source file, does.
    (tmp_path / "src/a.cc").write_text("int b;")
    d1 = run_record.source_digest(str(tmp_path))
    assert d1 != d0
    make_tree(tmp_path, {"src/cuda/k.cu": "__global__ void k() {}"})
    assert run_record.source_digest(str(tmp_path)) not in (d0, d1)


def test_digest_of_an_empty_tree_is_unknown(tmp_path):
    assert run_record.source_digest(str(tmp_path)) == "unknown"


def test_digest_only_prints_the_digest_alone(tmp_path, capsys):
    make_tree(tmp_path, {"src/a.cc": "int a;"})
    run_record.main(["--digest-only", str(tmp_path)])
    assert capsys.readouterr().out.strip() == run_record.source_digest(str(tmp_path))
