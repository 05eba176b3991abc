"""Fill in the middle at a line start, with the model (greedy; prints JSON): a whole line taken
out of a file (a complete logical line on one physical line, followed by a line that starts a
logical line), the cursor then put in one of three places:

- `col0`: column 0 of the existing line that followed it (the answer goes above it);
- `indent`: the end of that existing line's indentation;
- `blank`: an empty line in place of the one taken out, indented as it was.

Per code set and cursor kind: offered answers whose file compiles (CPython's
`compile(text, name, "exec")`), offered answers that keep the existing text intact (the text
after the insert still starts a logical line, as deep in blocks as in the document or as
in the original file: `intact`), empty
answers, exact match and edit similarity of the answer's first non-blank line against the line
taken out (both stripped). The same cut points for every revision of the code (fixed seed), so
the same command measures a change before and after.

    .venv/bin/python bench/line_insert.py [--code stdlib|thirdparty] [--cuts 60] [--kinds col0 indent blank]
        [--model default] [--max-tokens 48] [--out rows.jsonl]
    .venv/bin/python bench/line_insert.py --rescore rows.jsonl   # the figures again from a run's rows
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsp_server.threads import use_fair_threads  # noqa: E402

use_fair_threads()  # before torch loads libgomp, as the CLI does

from _util import CODE_SETS  # noqa: E402
from grammar_tools.parsing.cpython_check import compiles  # noqa: E402
from completion_quality import candidate_files, edit_similarity  # noqa: E402

KINDS = ("col0", "indent", "blank")


def _tokens(text: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None


def logical_lines(text: str) -> tuple[set[int], set[int]] | None:
    """The 0-based physical lines where logical lines start, and those where they end."""
    toks = _tokens(text)
    if toks is None:
        return None
    starts, ends = set(), set()
    new = True
    for t in toks:
        if t.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            continue
        if t.type == tokenize.NEWLINE:
            ends.add(t.start[0] - 1)
            new = True
            continue
        if new and t.type != tokenize.ENDMARKER:
            starts.add(t.start[0] - 1)
        new = False
    return starts, ends


def blocks_at(text: str, line: int, col: int) -> tuple[tuple[int, int], ...] | None:
    """The enclosing blocks of the token at (0-based `line`, `col`) when it starts a logical
    line: (header line, body column) per block, outermost first; None when no token starts
    there or it does not start a logical line."""
    toks = _tokens(text)
    if toks is None:
        return None
    stack: list[tuple[int, int]] = []
    header = 0  # the line where the last logical line started
    new = True
    for t in toks:
        if t.type == tokenize.INDENT:
            stack.append((header, t.end[1]))
            continue
        if t.type == tokenize.DEDENT:
            stack.pop()
            continue
        if t.type in (tokenize.NL, tokenize.COMMENT, tokenize.ENCODING):
            continue
        if t.type == tokenize.NEWLINE:
            new = True
            continue
        if t.start == (line + 1, col):
            return tuple(stack) if new else None
        if t.start > (line + 1, col):
            return None
        if new:
            header = t.start[0] - 1
        new = False
    return None


def intact(doc: str, kept: int, spliced: str, at: int, original: list[str], nxt: int) -> bool:
    """Whether the existing line of `doc` at offset `kept` (its code), which stands at offset
    `at` in `spliced`, still starts a logical line there, as deep in blocks (the same
    indentation stack, Python's tokenizer's INDENT/DEDENT) as in `doc` or as that line (`nxt`)
    in the `original` file (an answer may restore the header the cut took away)."""
    in_doc = blocks_at(doc, doc.count("\n", 0, kept), kept - (doc.rfind("\n", 0, kept) + 1))
    in_original = blocks_at("\n".join(original), nxt, len(original[nxt]) - len(original[nxt].lstrip()))
    got = blocks_at(spliced, spliced.count("\n", 0, at), at - (spliced.rfind("\n", 0, at) + 1))
    return got is not None and any(want is not None and [c for _, c in want] == [c for _, c in got]
                                   for want in (in_doc, in_original))


def cut_points(n: int, seed: int, code: str) -> list[dict]:
    rng = random.Random(seed)
    files = candidate_files(code)
    cuts, seen = [], set()
    parsed: dict[Path, tuple] = {}
    tries = 0
    while len(cuts) < n and tries < 200 * n:
        tries += 1
        p = rng.choice(files)
        if p not in parsed:
            text = p.read_text(encoding="utf-8")
            parsed[p] = (text.split("\n"), logical_lines(text))
        lines, logical = parsed[p]
        if logical is None:
            continue
        starts, ends = logical
        i = rng.randrange(len(lines) - 1)
        s = lines[i].strip()
        if len(s) < 4 or s.startswith("#") or i not in starts or i not in ends or (p, i) in seen:
            continue
        nxt = i + 1
        while nxt < len(lines) and (not lines[nxt].strip() or lines[nxt].lstrip().startswith("#")):
            nxt += 1
        if nxt != i + 1 or nxt not in starts:  # the existing line directly below, starting a statement
            continue
        seen.add((p, i))
        cuts.append({"path": str(p), "line": i, "next": nxt})
    return cuts


def case(cut: dict, kind: str) -> tuple[str, int, int]:
    """The document and cursor (line, column) of a cut point for a cursor kind."""
    lines = Path(cut["path"]).read_text(encoding="utf-8").split("\n")
    i = cut["line"]
    if kind == "blank":
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        return "\n".join(lines[:i] + [indent] + lines[i + 1 :]), i, len(indent)
    existing = lines[i + 1]
    col = 0 if kind == "col0" else len(existing) - len(existing.lstrip())
    return "\n".join(lines[:i] + lines[i + 1 :]), i, col


def score(row: dict, text: str) -> dict:
    """A run's row (the cut point, the answer's replace range `start`..`end`) scored for `text`."""
    cut = {"path": row["file"], "line": row["line"], "next": row["line"] + 1}
    original = Path(cut["path"]).read_text(encoding="utf-8").split("\n")
    doc, line, col = case(cut, row["kind"])
    if "start" in row:
        start, end = row["start"], row["end"]
    else:  # a run whose rows had no replace range (an older revision): the cursor, no text replaced
        from lsp_server.positions import offset_at

        start = end = offset_at(doc, line, col)
    truth = original[cut["line"]].strip()
    first = next((ln.strip() for ln in text.split("\n") if ln.strip()), "")
    row = {**row, "text": text, "empty": not text.strip(), "exact": first == truth,
           "similarity": edit_similarity(first, truth)}
    if text.strip():
        spliced = doc[:start] + text + doc[end:]
        rest = doc[end:]
        kept = end + len(rest) - len(rest.lstrip())  # the existing line's code, in the document
        row["compiles"] = compiles(spliced)
        row["intact"] = intact(doc, kept, spliced, kept + start + len(text) - end, original, cut["next"])
    return row


def summary(rows: list[dict]) -> dict:
    offered = [r for r in rows if not r["empty"]]
    return {
        "offered_compile": f'{sum(r["compiles"] for r in offered)}/{len(offered)}',
        "offered_intact": f'{sum(r["intact"] for r in offered)}/{len(offered)}',
        "offered_compile_and_intact": f'{sum(r["compiles"] and r["intact"] for r in offered)}/{len(offered)}',
        "empty": round(1 - len(offered) / len(rows), 4) if rows else None,
        "exact_match": round(sum(r["exact"] for r in rows) / len(rows), 4) if rows else None,
        "edit_similarity": round(sum(r["similarity"] for r in rows) / len(rows), 4) if rows else None,
        "broken": [{k: r[k] for k in ("file", "line", "character", "text")}
                   for r in offered if not (r["compiles"] and r["intact"])][:5],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--code", default="stdlib", choices=CODE_SETS)
    ap.add_argument("--cuts", type=int, default=60)
    ap.add_argument("--seed", type=int, default=2030)
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--model", default="default")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out")
    ap.add_argument("--rescore", metavar="ROWS.jsonl", help="no model: score the answers of an earlier run (--out)")
    args = ap.parse_args(argv)
    if args.rescore:
        with open(args.rescore) as f:
            rows = [json.loads(line) for line in f]
        by_kind: dict[str, list[dict]] = {}
        for row in rows:
            by_kind.setdefault(row["kind"], []).append(score(row, row["text"]))
        print(json.dumps({"rescored": args.rescore, "cuts": len(rows) // max(len(by_kind), 1),
                          **{k: summary(v) for k, v in by_kind.items()}}, indent=2))
        return 0

    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.options import EngineOptions

    engine = CompletionEngine.load(EngineOptions(model=args.model, max_tokens=args.max_tokens, temperature=0.0))
    cuts = cut_points(args.cuts, args.seed, args.code)
    out = open(args.out, "w") if args.out else None
    rows: dict[str, list[dict]] = {k: [] for k in args.kinds}
    for n, cut in enumerate(cuts):
        for kind in args.kinds:
            doc, line, col = case(cut, kind)
            r = engine.complete(CompletionRequest.at(doc, line, col, document=cut["path"], short_first=False))
            row = {"file": cut["path"], "line": line, "character": col, "kind": kind,
                   "start": r.start, "end": r.end,
                   "stop_reason": str(r.stop_reason), "offer_path": r.offer_path}
            row = score(row, r.text)
            rows[kind].append(row)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
        engine.forget(cut["path"])
        if (n + 1) % 10 == 0:
            print(f"{n + 1}/{len(cuts)}", file=sys.stderr, flush=True)
    report = {"model": engine.describe()["model"], "code": args.code, "cuts": len(cuts), "seed": args.seed,
              "max_tokens": args.max_tokens, **{kind: summary(rs) for kind, rs in rows.items()}}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
