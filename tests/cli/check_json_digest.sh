#!/usr/bin/env bash
# check_json_digest.sh BIN ROOT: mlakit-bench's --json records the source digest of the tree it
# was built from, which for a fresh build is bench/run_record.py's digest of ROOT. Exit 77
# (skipped) without python3.
set -u
bin=$1 root=$2
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --device cpu --lens 3x17 --heads 2 --dqk 64 --dvo 64 --iters 1 --json "$tmp/b.json" >/dev/null || {
  echo "FAIL: mlakit-bench exited $?"; exit 1; }
want=$(python3 "$root/bench/run_record.py" --digest-only "$root")
got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("source_digest"))' "$tmp/b.json")
if [[ "$got" != "$want" || ! "$want" =~ ^[0-9a-f]{16}$ ]]; then
  echo "FAIL: JSON source_digest '$got', tree digest '$want'"
  exit 1
fi
echo "ok: source_digest $got"
