"""Benchmark of the incremental parser's operations (prints JSON).

    .venv/bin/python bench/parser_ops.py [--files N]

Per-call times (p50/p95) of `feed`, `accepts` of one terminal and of a 2-3 terminal sequence,
`accepted_terminals` (cold: a fresh node each time), snapshot/restore, measured at every
lexeme of a sample of stdlib files; and the milliseconds to parse a 2,000-line prefix cold and
to update it after a one-character edit at its end. Also lark's own
`InteractiveParser.accepts()` on the same prefixes, for reference. `feed_lexeme`: the prefix
parser's cost per lexeme, f-/t-string lexemes (whose replacement fields are parsed:
`grammar_tools.parsing.fstring_fields`) apart from the others.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import STDLIB, read_source, stats_ms, stats_us, stdlib_files  # noqa: E402

from grammar_tools.parsing.lookahead import accepted  # noqa: E402
from grammar_tools.parsing.check import IncrementalParser, accepts  # noqa: E402
from grammar_tools.parsing.incremental import PrefixParser  # noqa: E402
from grammar_tools.lexing.lexer_automaton import load_lexer_automaton  # noqa: E402
from grammar_tools.parsing.recognizer import Recognizer  # noqa: E402
from grammar_tools.parsing.versions import NEWEST  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--lark-samples", type=int, default=300)
    args = ap.parse_args()

    t0 = time.perf_counter()
    rec = Recognizer()
    lexer = load_lexer_automaton()
    setup_s = time.perf_counter() - t0
    rng = random.Random(0)
    files = [p for p in stdlib_files(include_tests=False) if p.stat().st_size > 5000]
    rng.shuffle(files)

    feed_t, acc1_t, accseq_t, accepted_t, snap_t, restore_t = [], [], [], [], [], []
    lexeme_t: dict[str, list[float]] = {"fstring": [], "other": []}
    positions = 0
    for path in files[: args.files]:
        data = read_source(path)
        if data is None:
            continue
        steps = _steps(rec, lexer, data, lexeme_t)  # (node before, terminal that really follows)
        for i, (node, t) in enumerate(steps):
            t1 = time.perf_counter()
            rec.feed(node, t)
            feed_t.append(time.perf_counter() - t1)
            ip = IncrementalParser(rec, (node,))
            t1 = time.perf_counter()
            ip.accepts([t])
            acc1_t.append(time.perf_counter() - t1)
            seq = [s[1] for s in steps[i : i + 2 + i % 2]]
            t1 = time.perf_counter()
            accepts(rec, node, seq)
            accseq_t.append(time.perf_counter() - t1)
            fresh = type(node)(node.state, node.parent, node.attr, node.ctx, node.depth, node.indent)
            t1 = time.perf_counter()
            accepted(rec, fresh)
            accepted_t.append(time.perf_counter() - t1)
            t1 = time.perf_counter()
            snap = ip.snapshot()
            snap_t.append(time.perf_counter() - t1)
            ip.feed(t)
            t1 = time.perf_counter()
            ip.restore(snap)
            restore_t.append(time.perf_counter() - t1)
            positions += 1

    # lark's InteractiveParser.accepts() on the same kind of prefixes
    lark_t = []
    try:
        from lark import Lark, Token
        from lark.lexer import Lexer

        class _NoLexer(Lexer):
            def __init__(self, conf):
                pass

            def lex(self, data):
                return iter(())

        from grammar_tools.grammar import grammar_text

        lark_parser = Lark(grammar_text(), parser="lalr", lexer=_NoLexer, start="file_input")
        plain = Recognizer(python_version=NEWEST, semantic_checks=False)
        path = files[0]
        data = read_source(path)
        hist = _terminals(plain, lexer, data)
        ip = lark_parser.parse_interactive("")
        for i, name in enumerate(hist[:2000]):
            if i % 7 == 0 and name not in ("_INDENT", "_DEDENT"):
                t1 = time.perf_counter()
                ip.accepts()
                lark_t.append(time.perf_counter() - t1)
            ip.feed_token(Token(name, ""))
    except Exception as e:  # the reference figure is optional
        print(f"lark reference skipped: {e}", file=sys.stderr)

    # 2,000-line prefix, cold, then a one-character edit at its end
    big = None
    for p in sorted(STDLIB.glob("*.py")):
        d = read_source(p)
        if d is not None and d.count(b"\n") >= 2500 and p.name == "typing.py":
            big = (p, d)
    if big is None:
        big = next((p, d) for p in stdlib_files(include_tests=False) if (d := read_source(p)) and d.count(b"\n") >= 2500)
    path, data = big
    lines = data.split(b"\n")
    prefix = b"\n".join(lines[:2000]) + b"\n    x = foo"
    cold, update = [], []
    for _ in range(7):
        parser = PrefixParser(rec, lexer)
        t1 = time.perf_counter()
        parser.parse(prefix)
        cold.append(time.perf_counter() - t1)
        for ch in (b"b", b"a", b"r"):
            prefix2 = prefix + ch
            t1 = time.perf_counter()
            parser.parse(prefix2)
            update.append(time.perf_counter() - t1)
            prefix = prefix2
        prefix = b"\n".join(lines[:2000]) + b"\n    x = foo"

    out = {
        "benchmark": "parser_ops",
        "python": sys.version.split()[0],
        "files": args.files,
        "positions": positions,
        "setup_s": round(setup_s, 3),
        "feed": stats_us(feed_t),
        "accepts_one": stats_us(acc1_t),
        "accepts_sequence_2_3": stats_us(accseq_t),
        "accepted_terminals_cold": stats_us(accepted_t),
        "feed_lexeme": {k: stats_us(v) for k, v in lexeme_t.items()},
        "snapshot": stats_us(snap_t),
        "restore": stats_us(restore_t),
        "lark_interactive_accepts": stats_us(lark_t) if lark_t else None,
        "prefix_2000_lines": {"file": str(path.relative_to(STDLIB)), "bytes": len(prefix), "cold": stats_ms(cold)},
        "one_char_edit_at_end": stats_ms(update),
    }
    print(json.dumps(out, indent=2))


def _steps(rec, lexer, data, lexeme_t):
    """(configuration, the terminal that follows it) at every non-layout lexeme of a file;
    the time of each `feed_lexeme` into `lexeme_t` by kind."""
    g = rec.grammar
    nl = g.term_id["_NEWLINE"]
    parser = PrefixParser(rec, lexer)
    lexemes, _, _ = lexer.lex(data)
    configs = [rec.initial()]
    out = []
    for a, b, d in lexemes:
        terms = lexer.accepting_ids[d]
        if nl not in terms and not all(t in g.ignored for t in terms):
            node = configs[0]
            for t in terms:
                if rec.feed(node, t) is not None:
                    out.append((node, t))
                    break
        t1 = time.perf_counter()
        configs = parser.feed_lexeme(configs, data, a, b, d)
        kind = "fstring" if not parser.fields.terminals.isdisjoint(terms) else "other"
        lexeme_t[kind].append(time.perf_counter() - t1)
    return out


def _terminals(rec, lexer, data) -> list[str]:
    """The terminal sequence of a file (names), as fed to the recognizer."""
    from grammar_tools.parsing.incremental import newline_width

    g = rec.grammar
    nl = g.term_id["_NEWLINE"]
    lexemes, state, start = lexer.lex(data)
    node = rec.initial()
    out = []
    for a, b, d in lexemes:
        terms = lexer.accepting_ids[d]
        if nl in terms:
            n = rec.feed_newline(node)
            if n is not node:
                out.append("_NEWLINE")
            col, alt = newline_width(data[a:b])
            extra = rec.indentation_terminals(n, col, alt) or []
            node = rec.feed_indentation(n, col, alt)
            out.extend(g.terminals[t] for t in extra if n.depth == 0)
        elif all(t in g.ignored for t in terms):
            continue
        else:
            for t in terms:
                m = rec.feed(node, t)
                if m is not None:
                    node = m
                    out.append(g.terminals[t])
                    break
    return out


if __name__ == "__main__":
    main()
