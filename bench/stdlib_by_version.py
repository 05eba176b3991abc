"""How much of another CPython's own standard library the grammar accepts for its version.

    .venv/bin/python bench/stdlib_by_version.py PYTHON [--tests] [--show 40]

PYTHON is an interpreter of a supported version (`~/.pyenv/versions/3.13.0/bin/python`): its
standard library (tests left out unless --tests) is read with `check_source` and
Recognizer(python_version=that version). Its files are valid for it, so each refusal is syntax
of that version the grammar does not accept yet (notes/issue20.md). Prints JSON: the counts,
then the refused files with where and why (at most --show of them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from grammar_tools.parsing.check import check_source
from grammar_tools.parsing.incremental import PrefixParser
from grammar_tools.parsing.recognizer import Recognizer

_ASK = "import sys, sysconfig; print(*sys.version_info[:2]); print(sysconfig.get_paths()['stdlib'])"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("python")
    ap.add_argument("--tests", action="store_true", help="also the test packages")
    ap.add_argument("--show", type=int, default=40, help="refused files to list")
    args = ap.parse_args()
    out = subprocess.run([args.python, "-c", _ASK], capture_output=True, text=True, check=True).stdout.split("\n")
    version = tuple(int(x) for x in out[0].split())
    root = Path(out[1])
    files = []
    for p in sorted(root.rglob("*.py")):
        parts = p.relative_to(root).parts
        if parts[0] == "site-packages" or (not args.tests and {"test", "tests", "idle_test"} & set(parts[:-1])):
            continue
        files.append(p)
    parser = PrefixParser(Recognizer(python_version=version))
    t0 = time.perf_counter()
    refused = []
    for p in files:
        result = check_source(p.read_bytes(), parser)
        if not result.ok:
            refused.append((p.relative_to(root), result))
    seconds = time.perf_counter() - t0
    print(json.dumps({
        "python_version": f"{version[0]}.{version[1]}",
        "tests": args.tests,
        "files": len(files),
        "accepted": len(files) - len(refused),
        "seconds": round(seconds, 1),
        "refused": [{"file": str(p), "why": str(result)} for p, result in refused[: args.show]],
    }, indent=2))


if __name__ == "__main__":
    main()
