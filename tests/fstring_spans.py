"""Where CPython 3.12+'s own tokenizer puts each f-/t-string, against our lexer's lexemes.

CPython 3.12's `tokenize` reads f-strings with PEP 701's rules and emits FSTRING_START ...
FSTRING_END; the span from the start of an outermost FSTRING_START to the end of its
FSTRING_END is one lexeme of ours (FSTRING, LONG_FSTRING, TSTRING or LONG_TSTRING), read by
maximal munch from the start state, or our lexer does not end f-strings where CPython does.
`SPANS_SCRIPT` runs under that interpreter (no project imports): it reads a JSON list of file
paths on stdin and prints, per file, the byte spans of its outermost f-strings, or why the file
was skipped (not UTF-8, not compiled by that version, not tokenized).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from grammar_tools.lexing.lexer_automaton import START, LexerAutomaton

FSTRING_TERMINALS = ("FSTRING", "LONG_FSTRING", "TSTRING", "LONG_TSTRING")

SPANS_SCRIPT = """\
import io, json, sys, tokenize, warnings
warnings.simplefilter("ignore")
for path in json.load(sys.stdin):
    try:
        data = open(path, "rb").read()
        src = data.decode("utf-8")
        compile(data, path, "exec")
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except Exception as e:
        print(json.dumps({"path": path, "skipped": type(e).__name__}))
        continue
    starts, pos = [0], 0
    lines = io.StringIO(src).readlines()
    for line in lines:
        pos += len(line.encode("utf-8"))
        starts.append(pos)

    def offset(row, col):
        return starts[row - 1] + len(lines[row - 1][:col].encode("utf-8")) if row <= len(lines) else pos

    spans, depth = [], 0
    for t in toks:
        if t.type == tokenize.FSTRING_START:
            if depth == 0:
                begin = offset(*t.start)
            depth += 1
        elif t.type == tokenize.FSTRING_END:
            depth -= 1
            if depth == 0:
                spans.append((begin, offset(*t.end)))
    print(json.dumps({"path": path, "spans": spans}))
"""


def interpreters(min_version: tuple[int, int] = (3, 12)) -> dict[tuple[int, int], str]:
    """pyenv's CPython interpreters of `min_version` or newer, one per version."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found: dict[tuple[int, int], str] = {}
    for d in sorted(pyenv.glob("3.*")):
        parts = d.name.split(".")
        if len(parts) < 2 or not (parts[0] + parts[1]).isdigit():
            continue
        v = (int(parts[0]), int(parts[1]))
        exe = d / "bin" / "python"
        if v >= min_version and v not in found and exe.exists():
            found[v] = str(exe)
    return found


def stdlib_files(exe: str) -> list[Path]:
    """Every .py file of that interpreter's standard library, tests included."""
    out = subprocess.run([exe, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
                         capture_output=True, text=True, check=True, timeout=60)
    return sorted(Path(out.stdout.strip()).rglob("*.py"))


def cpython_spans(exe: str, paths: list[Path]) -> list[dict]:
    run = subprocess.run([exe, "-c", SPANS_SCRIPT], input=json.dumps([str(p) for p in paths]),
                         capture_output=True, text=True, check=True, timeout=1200)
    return [json.loads(line) for line in run.stdout.splitlines()]


def our_lexeme(lexer: LexerAutomaton, data: bytes, start: int) -> tuple[int, list[str]]:
    """The end of the lexeme that maximal munch reads from `start` (from the start state), and
    the terminals it would be; an empty list where it can't end there."""
    rows = lexer.rows
    state, i = START, start
    while i < len(data) and rows[state][data[i]] >= 0:
        state = rows[state][data[i]]
        i += 1
    return i, lexer.grammar.names(lexer.accepting[state]) if state != START else []


def compare(lexer: LexerAutomaton, results: list[dict]) -> dict:
    """Counts of f-strings whose lexeme is CPython's, and the ones that are not."""
    files = spans = 0
    differ: list[dict] = []
    skipped: dict[str, int] = {}
    for r in results:
        if "skipped" in r:
            skipped[r["skipped"]] = skipped.get(r["skipped"], 0) + 1
            continue
        files += 1
        data = Path(r["path"]).read_bytes()
        for begin, end in r["spans"]:
            spans += 1
            ours, names = our_lexeme(lexer, data, begin)
            if ours != end or not set(names) & set(FSTRING_TERMINALS):
                differ.append({"path": r["path"], "span": [begin, end], "ours": ours, "as": names,
                               "text": data[begin:max(end, ours) + 1][:300].decode("utf-8", "replace")})
    return {"files": files, "fstrings": spans, "differ": differ, "skipped": skipped}
