"""The cost of "checked before offered" on long files (prints JSON).

    .venv/bin/python bench/edit_check.py [--code stdlib|thirdparty] [--min-lines 2000] [--cuts 20] [--strict] [--reach N] [--cpu]

For each file of the code set with at least `--min-lines` lines, `--cuts` cut points (line-start
and mid-line; the file cut at the cursor and the rest of the line removed, as
bench/completion_quality.py does). Per cut point, the document's prefix parser is first left as
a request leaves it (the text before the cursor parsed: the matcher's work, not timed), then
timed: the `EditCheck` set-up and the checks of the edits a stop policy asks about -- the line's
own rest (compatible), two prefixes of it, the rest with a stray `)`, a string opener, a newline.
Reported per class of file length (the budget: a file of 5,000 lines or more adds at most ~20 ms
at p90 to a request): ms per check and per request (set-up + its checks), lexemes read per check,
how the checks ended (met the document's parse / read to the end of the file / refused).

The grammar against CPython: every edit the grammar passes is also given to CPython's compiler
(grammar_tools/parsing/cpython_check.py; the whole edited file, untimed); `grammar_ok_cpython_rejects`
counts those CPython refuses (the grammar accepts a few things CPython rejects, `f() = 1`), and
`cpython_statement_ms` is what a bounded CPython check would cost: compiling the top-level
statement(s) from the one holding the cursor to the one where the check met the document's
parse.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import CODE_SETS, code_files, read_source, relative_name, stats_ms  # noqa: E402

from grammar_tools.parsing.cpython_check import compiles  # noqa: E402
from grammar_tools.parsing.edit_check import EditCheck  # noqa: E402
from grammar_tools.parsing.incremental import ParseError, PrefixParser  # noqa: E402
from grammar_tools.lexing.lexer_automaton import LexError, load_lexer_automaton  # noqa: E402
from grammar_tools.parsing.recognizer import Recognizer  # noqa: E402
from grammar_tools.parsing.incremental import parse_prefix  # noqa: E402



def top_level_region(text: str, start: int, end: int) -> str:
    """The lines of the top-level statements from the one holding offset `start` to the one
    holding `end` (found by lines that start at column 0 with code: an estimate for timing)."""
    lines = text.split("\n")
    starts = [0]
    for ln in lines[:-1]:
        starts.append(starts[-1] + len(ln) + 1)
    first = text.count("\n", 0, start)
    last = text.count("\n", 0, end)

    def top(i: int) -> bool:
        ln = lines[i]
        return bool(ln) and not ln[0].isspace() and not ln.startswith(("#", ")", "]", "}"))

    while first > 0 and not top(first):
        first -= 1
    last += 1
    while last < len(lines) and not top(last):
        last += 1
    return "\n".join(lines[first:last])


def edits(rest: str) -> list[str]:
    return [rest, rest[: len(rest) // 2], rest[: len(rest) // 3], rest + ")", '"""', "\n"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", default="stdlib", choices=CODE_SETS)
    ap.add_argument("--min-lines", type=int, default=2000)
    ap.add_argument("--cuts", type=int, default=20, help="cut points per file")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--strict", action="store_true", help="the engine's mode (EditCheck strict=True)")
    ap.add_argument("--reach", type=int, help="EditCheck's reach (the engine's: 16384)")
    ap.add_argument("--cpu", action="store_true",
                    help="time by the process's CPU time (a loaded, shared machine) instead of the wall clock")
    args = ap.parse_args()
    clock = time.process_time if args.cpu else time.perf_counter

    rec = Recognizer()
    lexer = load_lexer_automaton()
    rng = random.Random(args.seed)
    classes: dict[str, dict[str, list]] = {}
    outcomes = {"met": 0, "to_end": 0, "refused": 0}
    disagree: list[dict] = []
    agreed = 0
    files = 0
    for path in code_files(args.code):
        data = read_source(path)
        if data is None or data.count(b"\n") < args.min_lines:
            continue
        files += 1
        text = data.decode()
        lines = text.split("\n")
        size = "5000+" if len(lines) >= 5000 else f"{args.min_lines}-4999"
        bucket = classes.setdefault(size, {"check": [], "request": [], "setup": [], "lexemes": [], "cpython": []})
        done = 0
        while done < args.cuts:
            i = rng.randrange(len(lines))
            line = lines[i]
            if len(line.strip()) < 4 or line.lstrip().startswith("#"):
                continue
            indent = len(line) - len(line.lstrip())
            ch = indent if rng.random() < 0.5 else rng.randrange(indent + 1, len(line))
            before = "\n".join(lines[:i] + [line[:ch]])
            after = "\n" + "\n".join(lines[i + 1 :])
            parser = PrefixParser(rec, lexer)
            try:
                state = parse_prefix(parser, before.encode())  # what the request's matcher did
            except (ParseError, LexError):
                continue
            done += 1
            parsed = state.recovered.rewrite(before.encode()) if state.recovered else before.encode()
            t0 = clock()
            check = EditCheck(parser, parsed, after.encode(), strict=args.strict, reach=args.reach)
            setup = clock() - t0
            total = setup
            for insert in edits(line[ch:]):
                t1 = clock()
                verdict = check.check(insert.encode())
                dt = clock() - t1
                total += dt
                bucket["check"].append(dt)
                bucket["lexemes"].append(verdict.lexemes)
                outcomes["refused" if not verdict.ok else "met" if verdict.synced else "to_end"] += 1
                if verdict.ok:
                    edited = before + insert + after
                    if compiles(edited):
                        agreed += 1
                    elif len(disagree) < 20:
                        disagree.append({"file": relative_name(path), "line": i, "character": ch, "insert": insert})
                    if verdict.synced is not None:
                        region = top_level_region(edited, len(before), len(edited.encode()[: verdict.synced].decode()))
                        t2 = clock()
                        compiles(region)
                        bucket["cpython"].append(clock() - t2)
            bucket["setup"].append(setup)
            bucket["request"].append(total)
    print(json.dumps({
        "code": args.code,
        "files": files,
        "min_lines": args.min_lines,
        "strict": args.strict,
        "reach": args.reach,
        "clock": "process CPU time" if args.cpu else "wall",
        "by_file_lines": {
            size: {
                "cut_points": len(b["request"]),
                "request_ms": stats_ms(b["request"]),
                "check_ms": stats_ms(b["check"]),
                "setup_ms": stats_ms(b["setup"]),
                "lexemes_per_check": {"p50": int(sorted(b["lexemes"])[len(b["lexemes"]) // 2]),
                                      "p90": int(sorted(b["lexemes"])[len(b["lexemes"]) * 9 // 10]),
                                      "max": max(b["lexemes"])},
                "cpython_statement_ms": stats_ms(b["cpython"]) if b["cpython"] else None,
            }
            for size, b in sorted(classes.items()) if b["request"]
        },
        "checks": outcomes,
        "grammar_ok_cpython_accepts": agreed,
        "grammar_ok_cpython_rejects": len(disagree),
        "cpython_rejects": disagree,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }, indent=1))


if __name__ == "__main__":
    main()
