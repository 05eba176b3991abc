"""Checked before offered, without a language model (prints JSON): the cut points of
bench/completion_quality.py (the file cut at the cursor, the rest of the line dropped, the next
lines kept), completed by the tests' scripted model (tests/scripted_model.py), which writes the
original file's text from the cursor, with per-step noise (a step ignores the script with that
probability: random tokens, as a model that strays) and, with `--closers`, a closer written first
(a bracket, a quote, a string's end, a colon: a model that ends things early).

    .venv/bin/python bench/offer_validity.py [--code stdlib|thirdparty] [--cuts 300] [--noise 0.15]
        [--closers] [--max-tokens 48] [--out rows.jsonl]

Reported: offered answers whose file compiles (CPython's `compile`, grammar_tools/parsing/cpython_check.py,
of the cut file with the answer in place of the rest of the line, the next lines kept: as
completion_quality.py's parses_after_accept), empty answers, exact match and edit similarity of the answer's first line
against the original rest of the line, which search step gave each answer (`offer_path`, where
the code has one), the engine's time per request (p50/p90; no model time to speak of: this is
the engine's own cost, the stop policy and the check included) and the check's share
(`check_ms`). Runs on any revision of the code (fields it lacks are left out), so the same
command measures a change before and after.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from completion_quality import cut_points, edit_similarity, percentile  # noqa: E402

from grammar_tools.parsing.cpython_check import compiles  # noqa: E402

CLOSERS = [")", "]", "}", '"', "'", '"""', "):", ")\n", '"""\n', "\n", ":\n"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--code", default="stdlib", choices=["stdlib", "thirdparty"])
    ap.add_argument("--cuts", type=int, default=300)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--noise", type=float, default=0.15)
    ap.add_argument("--closers", action="store_true", help="the model writes a closer first, then the file's text")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    from mask_store.loading import load_compiled
    from scripted_model import ScriptedRuntime

    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.options import EngineOptions

    compiled, tok = load_compiled("default")
    rng = random.Random(args.seed)
    cuts = cut_points(args.cuts, args.seed, args.code)
    rows = []
    out = open(args.out, "w") if args.out else None
    for n, cut in enumerate(cuts):
        lines = Path(cut["path"]).read_text(encoding="utf-8").split("\n")
        i, ch = cut["line"], cut["character"]
        doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
        before = "\n".join(lines[:i] + [lines[i][:ch]])
        closer = rng.choice(CLOSERS) if args.closers else ""
        intended = before + closer + "\n".join([lines[i][ch:]] + lines[i + 1 :])
        runtime = ScriptedRuntime(tok, intended.encode(), noise=args.noise, seed=n)
        engine = CompletionEngine(EngineOptions(max_tokens=args.max_tokens), runtime, compiled)
        t0 = time.perf_counter()
        r = engine.complete(CompletionRequest.at(doc, i, ch, document=cut["path"], short_first=False))
        ms = (time.perf_counter() - t0) * 1000
        spliced = "\n".join(lines[:i] + [lines[i][:ch] + r.text] + lines[i + 1 :])
        truth = lines[i][ch:].strip()
        first = r.text.split("\n")[0].strip()
        row = {"file": cut["path"], "line": i, "character": ch, "kind": cut["kind"], "closer": closer,
               "text": r.text, "stop_reason": str(r.stop_reason), "offer_path": getattr(r, "offer_path", None),
               "check_ms": getattr(r, "check_ms", None), "ms": round(ms, 2),
               "parses": compiles(spliced) if r.text else None, "exact": first == truth,
               "similarity": edit_similarity(first, truth)}
        rows.append(row)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
        if (n + 1) % 50 == 0:
            print(f"{n + 1}/{len(cuts)}", file=sys.stderr, flush=True)
    offered = [r for r in rows if r["text"]]
    paths: dict[str, int] = {}
    for r in rows:
        if r["offer_path"] is not None:
            paths[r["offer_path"]] = paths.get(r["offer_path"], 0) + 1
    checks = [r["check_ms"] for r in rows if r["check_ms"] is not None]
    report = {
        "code": args.code, "cuts": len(rows), "noise": args.noise, "closers": args.closers,
        "max_tokens": args.max_tokens, "seed": args.seed,
        "offered_parse": f'{sum(r["parses"] for r in offered)}/{len(offered)}',
        "offered_parse_rate": round(sum(r["parses"] for r in offered) / len(offered), 4) if offered else None,
        "empty": round(1 - len(offered) / len(rows), 4),
        "exact_match": round(sum(r["exact"] for r in rows) / len(rows), 4),
        "edit_similarity": round(sum(r["similarity"] for r in rows) / len(rows), 4),
        "engine_ms_p50": round(percentile([r["ms"] for r in rows], 50), 1),
        "engine_ms_p90": round(percentile([r["ms"] for r in rows], 90), 1),
        **({"offer_paths": paths} if paths else {}),
        **({"check_ms_p50": round(percentile(checks, 50), 2), "check_ms_p90": round(percentile(checks, 90), 2)}
           if checks else {}),
        "broken": [{k: r[k] for k in ("file", "line", "character", "closer", "text")}
                   for r in offered if not r["parses"]][:10],
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
