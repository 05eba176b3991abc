"""Canonical tokenization on real code: its cost per mask and its soundness (prints JSON).

    .venv/bin/python bench/canonical_masks.py [--code stdlib|thirdparty] [--tokens 100000] [--seed 0]

Walks files of a code set (bench/_util.py code_files) along the tokenizer's own encoding of each
(teacher forcing) with two matchers on the server's store (streamlined), each with its own
CompiledGrammar (own mask cache, own recognizer): canonical tokenization off and on. At every
position both masks are timed, in alternating order, so that the machine's load weighs on both
alike. Reported:
- mask_ms: p50/p95/p99/mean per side over all positions, and over the positions whose grammar
  mask was computed rather than found in the cache (`computed`); `added_ms`: on minus off at the
  same position (p50/p99);
- rejections with canonicality on: the tokenizer's own encoding must never be masked (0), and
  fallbacks (steps where the AND left nothing: none expected on the tokenizer's own encoding);
- what canonicality removes: the mean share of the grammar's allowed tokens the AND drops;
- the canonical rows computed and found in the row cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _util import CODE_SETS, code_files, files_until_tokens, relative_name, stats_ms  # noqa: E402


def choose_files(tok, code: str, tokens: int, seed: int) -> list[tuple[Path, str]]:
    """Files of the code set in a shuffled order (seeded), until `tokens` tokens."""
    return [(p, data.decode()) for p, data in files_until_tokens(code_files(code), tok, tokens, seed)]


def walk(off, on, tok, files) -> dict:
    from mask_store.canonical import OFF, START
    from mask_store.matcher import GrammarMatcher, MaskCounts

    times = {"off": [], "on": []}
    computed = {"off": [], "on": []}
    added = []
    removed_share = []
    positions = rejections = 0
    first_rejections: list[str] = []
    counts = MaskCounts()  # the canonical side's matchers count into it
    for path, text in files:
        ids = tok.encode(text)
        matchers = {"off": GrammarMatcher.from_prefix(off, b"", canonical=OFF),
                    "on": GrammarMatcher.from_prefix(on, b"", canonical=START, counts=counts)}
        comps = {"off": off, "on": on}
        for i, t in enumerate(ids):
            masks, dts = {}, {}
            for side in (("off", "on") if i % 2 else ("on", "off")):
                comp = comps[side]
                n0 = comp.memo.stats["masks"]
                t0 = time.perf_counter()
                masks[side] = matchers[side].next_token_mask()
                dts[side] = time.perf_counter() - t0
                times[side].append(dts[side])
                if comp.memo.stats["masks"] > n0:  # the grammar's mask computed, not from the cache
                    computed[side].append(dts[side])
            added.append(dts["on"] - dts["off"])
            positions += 1
            allowed = int(masks["off"].sum())
            if allowed:
                removed_share.append(1 - int((masks["on"] & masks["off"]).sum()) / allowed)
            if not masks["on"][t] or not matchers["on"].accept_token(t):
                rejections += 1
                if len(first_rejections) < 5:
                    first_rejections.append(f"{relative_name(path)} token {i}: {tok.vocab.token_bytes[t]!r}")
                break
            if not matchers["off"].accept_token(t):
                break  # the grammar alone rejects it: a store problem, not this benchmark's
    rows = on.canonical.row_cache_info()
    a = np.asarray(added) * 1e3
    return {
        "files": len(files),
        "positions": positions,
        "rejections_canonical_on": rejections,
        "first_rejections": first_rejections,
        "canonical_fallbacks": counts.canonical_fallbacks,
        "mask_ms": {side: stats_ms(v) for side, v in times.items()},
        "mask_ms_computed": {side: stats_ms(v) if v else None for side, v in computed.items()},
        "added_ms": {"p50": round(float(np.percentile(a, 50)), 4), "p99": round(float(np.percentile(a, 99)), 4),
                     "mean": round(float(a.mean()), 4)},
        "removed_share_of_grammar_mask_mean": round(float(np.mean(removed_share)), 4) if removed_share else None,
        "canonical_rows": {"computed": rows.misses, "from_cache": rows.hits},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--code", default="stdlib", choices=CODE_SETS)
    ap.add_argument("--tokens", type=int, default=100_000, help="tokens of code to walk (whole files)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="default")
    args = ap.parse_args(argv)

    from grammar_tools.parsing.recognizer import Recognizer
    from mask_store.loading import load_compiled
    from mask_store.compiled import CompiledGrammar

    on, tok = load_compiled(args.model)
    if on.canonical is None:
        print(json.dumps({"error": "the tokenizer has no canonical pairs (see the log)"}))
        return 1
    off = CompiledGrammar(on.store, on.vocab, Recognizer(), on.lexer)
    files = choose_files(tok, args.code, args.tokens, args.seed)
    t0 = time.perf_counter()
    report = {"benchmark": "canonical_masks", "code": args.code, "seed": args.seed, **walk(off, on, tok, files)}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(report, indent=2))
    return 0 if report["rejections_canonical_on"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
