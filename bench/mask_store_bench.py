"""Benchmark of the mask store, full and streamlined, and of the matcher (prints JSON).

    .venv/bin/python bench/mask_store_bench.py [--tokens 100000] [--model default]

1. builds the full store (build seconds, MB, load seconds, rows, unique masks);
2. streamlines it twice: with the analyses' caches empty (cold) and again from the cache, and
   reports the rows after each step (the seed's count: each lexer state's rows, boundary rows
   included; and the rows the file stores);
3. walks stdlib files token by token (teacher forcing) with both stores at once: every true
   next token must be allowed (rejections), both masks must be identical at every position
   (exactness), and per computed mask the parser checks and the time (p50/p99) of each.
The two matchers start with empty mask caches; each position times the two masks in
alternating order.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import files_until_tokens, read_source, stats_ms, stdlib_files  # noqa: E402

import numpy as np  # noqa: E402

from grammar_tools.analyses import bar_hillel  # noqa: E402
from grammar_tools import cache  # noqa: E402
from grammar_tools.analyses.contexts import after  # noqa: E402
from grammar_tools.lexing.lexer_automaton import load_lexer_automaton  # noqa: E402
from grammar_tools.parsing.recognizer import Recognizer  # noqa: E402
from mask_store.loading import build_store, open_store  # noqa: E402
from mask_store.compiled import CompiledGrammar  # noqa: E402
from mask_store.matcher import GrammarMatcher  # noqa: E402
from mask_store.streamline import streamline_store  # noqa: E402
from mask_store.vocabulary import load_tokenizer  # noqa: E402


def _describe(store, path: Path, build_s: float, tok) -> dict:
    t0 = time.perf_counter()
    loaded = open_store(path, tok)
    load_s = time.perf_counter() - t0
    info = loaded.info()
    return {
        "build_seconds": round(build_s, 2),
        "file_mb": round(os.path.getsize(path) / 1e6, 3),
        "load_seconds": round(load_s, 3),
        "rows": info["logical_rows"],
        "stored_rows": info["rows"],
        "groups": info["groups"],
        "unique_masks": info["unique_masks"],
        "nfa_states": info["nfa_states"],
    }


def _with_cache_dir(path: Path):
    """Point the analyses' on-disk cache (never-legal answers, decisions) at `path`."""
    os.environ["SYNTAXLOCK_CACHE"] = str(path)


def _walk(full: CompiledGrammar, stream: CompiledGrammar, tok, files) -> dict:
    positions = differing = rejections = 0
    first_diff: list[str] = []
    t_full: list[float] = []
    t_stream: list[float] = []
    c_full: list[int] = []
    c_stream: list[int] = []
    for path in files:
        text = read_source(path).decode()
        ids = tok.encode(text)
        mf = GrammarMatcher.from_prefix(full, b"")
        ms = GrammarMatcher.from_prefix(stream, b"")
        for i, t in enumerate(ids + [None]):
            order = (0, 1) if i % 2 else (1, 0)
            masks = [None, None]
            for k in order:
                comp, m = (full, mf) if k == 0 else (stream, ms)
                checks0, computed0 = comp.memo.stats["parser_checks"], comp.memo.stats["masks"]
                t0 = time.perf_counter()
                masks[k] = m.next_token_mask()
                dt = time.perf_counter() - t0
                if comp.memo.stats["masks"] > computed0:  # computed, not a cache hit
                    (t_full if k == 0 else t_stream).append(dt)
                    (c_full if k == 0 else c_stream).append(comp.memo.stats["parser_checks"] - checks0)
            positions += 1
            if not np.array_equal(masks[0], masks[1]):
                differing += 1
                if len(first_diff) < 5:
                    first_diff.append(f"{path.name} token {i}")
            if t is None:
                rejections += not ms.is_complete()
                break
            if not masks[1][t] or not ms.accept_token(t) or not mf.accept_token(t):
                rejections += 1
                break

    def checks(c: list[int]) -> dict:
        a = np.asarray(c or [0])
        return {
            "per_computed_mask_mean": round(float(a.mean()), 2),
            "p50": float(np.percentile(a, 50)),
            "p99": float(np.percentile(a, 99)),
            "total": int(a.sum()),
        }

    out = {
        "files": len(files),
        "positions": positions,
        "differing_masks": differing,
        "first_differences": first_diff,
        "rejections": rejections,
        "computed_masks": {"full": len(t_full), "streamlined": len(t_stream)},
        "parser_checks": {"full": checks(c_full), "streamlined": checks(c_stream)},
        "parser_checks_per_position": {
            "full": round(sum(c_full) / max(positions, 1), 2),
            "streamlined": round(sum(c_stream) / max(positions, 1), 2),
        },
        "mask_ms_computed": {"full": stats_ms(t_full), "streamlined": stats_ms(t_stream)},
    }
    checks = out["parser_checks"]
    out["parser_checks_ratio"] = round(checks["full"]["total"] / max(checks["streamlined"]["total"], 1), 2)
    return out


def _choose(tok, tokens: int, seed: int) -> list[Path]:
    """Stdlib files (tests excluded) in a shuffled order, until `tokens` tokens."""
    return [p for p, _ in files_until_tokens(stdlib_files(include_tests=False), tok, tokens, seed)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--tokens", type=int, default=100_000, help="tokens of stdlib code to walk")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bar-hillel-sample", type=int, default=8, help="cold is_never_legal queries to time")
    ap.add_argument("--list-files", action="store_true", help="only print the files the walk uses")
    args = ap.parse_args()

    tok = load_tokenizer(args.model)
    if args.list_files:
        print("\n".join(str(p) for p in _choose(tok, args.tokens, args.seed)))
        return
    lexer = load_lexer_automaton()
    rec = Recognizer()
    out: dict = {"benchmark": "mask_store", "model": args.model, "vocab_size": tok.vocab.size}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        user_cache = os.environ.get("SYNTAXLOCK_CACHE")
        t0 = time.perf_counter()
        full = build_store(tok, args.model, streamline=False, progress=False)
        full_s = time.perf_counter() - t0
        full_path = full.save(tmp / "full.safetensors")
        out["full"] = _describe(full, full_path, full_s, tok)

        # the analyses with empty caches, then from the cache
        _with_cache_dir(tmp / "cache-cold")
        t0 = time.perf_counter()
        stream = streamline_store(full, rec, progress=False, vocab=tok.vocab)
        cold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = streamline_store(full, rec, progress=False, vocab=tok.vocab)
        warm_s = time.perf_counter() - t0
        rows = [s["rows"] for s in stream.header["streamline"]["steps"]]
        assert [s["rows"] for s in again.header["streamline"]["steps"]] == rows
        assert again.header["streamline"]["analysis"]["analysis_cached"] == 1
        stream_path = stream.save(tmp / "streamlined.safetensors")
        out["streamlined"] = _describe(stream, stream_path, full_s + cold_s, tok)
        sl = stream.header["streamline"]
        out["streamline"] = {
            "seconds_cold": round(cold_s, 2),
            "seconds_cached": round(warm_s, 2),
            "analysis": sl["analysis"],
            "steps": [
                {**s, "reduction": round(sl["steps"][0]["rows"] / max(s["rows"], 1), 2)} for s in sl["steps"]
            ],
            "reduction": sl["reduction"],
            "file_size_ratio": round(out["full"]["file_mb"] / out["streamlined"]["file_mb"], 3),
        }

        # what one Bar-Hillel query costs, cold, on 2 processes (the streamlining asks it only
        # what the exploration leaves open)
        g = lexer.grammar
        tid = g.term_id
        sample = [
            (after(tid[x]), tuple(tid[y] for y in s))
            for x, s in [
                ("DEF", ("NAME",)), ("NAME", ("NAME",)), ("RPAR", ("NAME", "DOT", "NAME")),
                ("NAME", ("COLON", "COLON", "COLON")), ("RSQB", ("LPAR", "RPAR", "RPAR")),
                ("STRING", ("STRING", "NAME")), ("COMMA", ("RPAR", "EQUAL")), ("LPAR", ("RPAR", "RPAR")),
            ][: args.bar_hillel_sample]
        ]
        _with_cache_dir(tmp / "cache-bh")
        t0 = time.perf_counter()
        answers = bar_hillel.decide(g, sample, processes=2)
        bh_s = time.perf_counter() - t0
        out["bar_hillel_sample"] = {
            "queries": len(sample),
            "never": sum(answers.values()),
            "seconds_2_processes": round(bh_s, 2),
        }
        if user_cache is None:
            os.environ.pop("SYNTAXLOCK_CACHE", None)
        else:
            os.environ["SYNTAXLOCK_CACHE"] = user_cache
        cache.cache_dir()

        chosen = _choose(tok, args.tokens, args.seed)
        compiled_full = CompiledGrammar(open_store(full_path, tok), tok.vocab, rec, lexer)
        compiled_stream = CompiledGrammar(open_store(stream_path, tok), tok.vocab, rec, lexer)
        t0 = time.perf_counter()
        out["walk"] = _walk(compiled_full, compiled_stream, tok, chosen)
        out["walk"]["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
