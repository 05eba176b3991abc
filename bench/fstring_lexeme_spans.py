"""Every f-string of each pyenv CPython 3.12+'s standard library (tests included), as that
CPython's tokenizer spans it, against our lexer's lexeme from the same byte (see
tests/fstring_spans.py). Prints one JSON line per version: files read, f-strings, how many
differ (each refused by our lexer, or read to another end: `misread`, which must be 0), the
files skipped and why, and the differing ones (`--show N`).

    flock -s /work/wt/bench.lock .venv/bin/python bench/fstring_lexeme_spans.py [--show 20]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fstring_spans import FSTRING_TERMINALS, compare, cpython_spans, interpreters, stdlib_files  # noqa: E402

from grammar_tools.lexing.lexer_automaton import load_lexer_automaton  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", type=int, default=10, help="differing f-strings to print per version")
    args = ap.parse_args()
    lexer = load_lexer_automaton()
    found = interpreters()
    if not found:
        print(json.dumps({"error": "no pyenv CPython >= 3.12"}))
        return
    for v, exe in sorted(found.items()):
        r = compare(lexer, cpython_spans(exe, stdlib_files(exe)))
        misread = [d for d in r["differ"] if set(d["as"]) & set(FSTRING_TERMINALS)]
        print(json.dumps({"version": f"{v[0]}.{v[1]}", "files": r["files"], "fstrings": r["fstrings"],
                          "differ": len(r["differ"]), "misread": len(misread), "skipped": r["skipped"],
                          "lexer_states": lexer.n_states, "examples": r["differ"][: args.show]}, indent=1))


if __name__ == "__main__":
    main()
