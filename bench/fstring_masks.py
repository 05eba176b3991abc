"""Mask time inside f-strings vs outside, for a target Python version (prints JSON).

    .venv/bin/python bench/fstring_masks.py [--python-version 3.14] [--tokens 60000] [FILES...]

Walks files token by token (teacher forcing) with the cached streamlined store and times every
mask that is computed (not a cache hit), split by where the position is: inside an f-string
lexeme (every configuration of the matcher is in a state of FSTRING, LONG_FSTRING, or of the
template strings TSTRING, LONG_TSTRING) or outside. Without FILES: stdlib files (tests excluded)
that hold f-strings, shuffled, until `--tokens`; t-strings are in the modern corpus
(`tests/modern_corpus.py DIR`, then its files as FILES). `accept_ms`: the time to take each
token, split the same way: inside an f-/t-string it includes parsing the replacement fields the
token writes (`grammar_tools.parsing.fstring_fields`), the check that makes the lexeme's mask exact.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import files_until_tokens, stats_ms, stdlib_files  # noqa: E402

from grammar_tools.parsing.versions import NEWEST, format_version, parse_version  # noqa: E402
from mask_store.loading import load_compiled  # noqa: E402
from mask_store.matcher import GrammarMatcher  # noqa: E402


def _files(tok, tokens: int, seed: int) -> list[Path]:
    """Stdlib files with an f-string, shuffled (seeded), until `tokens` tokens."""
    return [p for p, _ in files_until_tokens(stdlib_files(include_tests=False), tok, tokens, seed,
                                             keep=lambda data: b'f"' in data or b"f'" in data)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--python-version", default=format_version(NEWEST))
    ap.add_argument("--tokens", type=int, default=60_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    compiled, tok = load_compiled("default")
    compiled = compiled.for_version(parse_version(args.python_version))
    g = compiled.recognizer.grammar
    fstring = {g.term_id[n] for n in ("FSTRING", "LONG_FSTRING", "TSTRING", "LONG_TSTRING")}
    files = args.files or _files(tok, args.tokens, args.seed)
    times: dict[str, list[float]] = {"inside_fstring": [], "outside": []}
    accept_times: dict[str, list[float]] = {"inside_fstring": [], "outside": []}
    positions = {"inside_fstring": 0, "outside": 0}
    rejections = 0
    for path in files:
        ids = tok.encode(path.read_text())
        m = GrammarMatcher.from_prefix(compiled, b"")
        for t in ids:
            where = ("inside_fstring" if m.configs and all(compiled.q_term[c.q] in fstring for c in m.configs)
                     else "outside")
            positions[where] += 1
            before = compiled.memo.stats["masks"]
            t0 = time.perf_counter()
            mask = m.next_token_mask()
            dt = time.perf_counter() - t0
            if compiled.memo.stats["masks"] > before:
                times[where].append(dt)
            if not mask[t]:
                rejections += 1
                break
            t0 = time.perf_counter()
            taken = m.accept_token(t)
            accept_times[where].append(time.perf_counter() - t0)
            if not taken:
                rejections += 1
                break
    print(json.dumps({
        "benchmark": "fstring_masks", "python_version": args.python_version, "files": len(files),
        "rejections": rejections, "positions": positions,
        "mask_ms_computed": {k: stats_ms(v) for k, v in times.items()},
        "accept_ms": {k: stats_ms(v) for k, v in accept_times.items()},
    }, indent=2))


if __name__ == "__main__":
    main()
