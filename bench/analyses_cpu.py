"""The streamlining analyses' CPU, one process (prints JSON).

    .venv/bin/python bench/analyses_cpu.py [--models default qwen] [--profile-batch after:RPAR --profile OUT]

Per model (SmolLM2's tokenizer, the Qwen2.5-Coder stand-in's), the rows that the analyses are
asked about (the full store's, after the interchangeable and follow-graph steps: the full store
from the cache, built once when missing), then `streamline._Streamliner._decide` as a build runs
it, but inline (one process: `processes=1`), with each task timed in CPU seconds: the
always/never step per context, Bar-Hillel's queries (those not in the on-disk cache), the
jointly-legal step per batch of contexts (its parser steps, `Explorer.steps`, beside). Also: a
hash of every decision (equal hashes: the same streamlined store), the analysis' stats
(`jointly_legal_contexts_cut` among them) and the process's peak RSS. `--profile-batch CTX`: the
batch holding that context (`Context.key`, e.g. `after:RPAR`) under cProfile, dumped to
`--profile`. Timings: under `timed_run` (the shared 2 cores); `uptime` is printed.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grammar_tools.analyses.contexts import AFTER, after  # noqa: E402
from grammar_tools.analyses.exploration import explorer  # noqa: E402
from grammar_tools.analyses.interchangeable import canonical_map, recognizer_classes  # noqa: E402
from grammar_tools.lexing.lexer_automaton import load_lexer_automaton  # noqa: E402
from grammar_tools.parsing.recognizer import Recognizer  # noqa: E402
from mask_store import loading  # noqa: E402
from mask_store import streamline as S  # noqa: E402
from mask_store.store import MaskStoreError  # noqa: E402
from mask_store.vocabulary import load_tokenizer  # noqa: E402

MODELS = ("default", "qwen")


def _model_spec(model: str) -> str | None:
    if model == "default":
        return None
    from lsp_server.model.stand_in import stand_in_dir

    return str(stand_in_dir())


def _pairs(model: str) -> tuple:
    """The analyses' (context, row) pairs for the model's store, as `_Streamliner.analyse` makes them."""
    tok = load_tokenizer(_model_spec(model))
    try:
        full = loading.open_store(loading.store_path_for(tok, False), tok)
    except MaskStoreError:
        full = loading.build_store(tok, _model_spec(model), streamline=False, progress=False)
        full.save(loading.store_path_for(tok, False))
    sl = S._Streamliner(full, Recognizer(load_lexer_automaton().grammar), False, 1, S.BAR_HILLEL_BUDGET_S,
                        S.JOINTLY_LEGAL_BUDGET_STEPS)
    sl.interchangeable()
    sl.follow()
    cmap = canonical_map(sl.g, recognizer_classes(sl.g))

    def canon(ctx):
        return after(cmap.get(ctx.terminal, ctx.terminal)) if ctx.kind == AFTER else ctx

    pairs = {(canon(grp.context), seq) for grp in sl.groups() for seq in grp.rows if seq}
    return sl, sorted(pairs, key=lambda p: (p[0].kind, p[0].terminal, p[1]))


def measure(model: str, profile_batch: str | None, profile_out: str | None) -> dict:
    sl, pairs = _pairs(model)
    g = sl.g
    log: dict = {"always_never": [], "bar_hillel": [], "jointly_legal": []}
    prof = cProfile.Profile() if profile_batch else None
    always_never, jointly_legal, bar_hillel_work = S._always_never, S._jointly_legal, S._bar_hillel_work
    seen = [0]

    def timed_always_never(grammar, contexts, budget):
        ex = explorer(grammar)
        if seen[0] % S.CONTEXTS_PER_WORKER == 0:
            ex.reset()  # a build forks a fresh worker every CONTEXTS_PER_WORKER contexts
        seen[0] += 1
        t0 = time.process_time()
        out = always_never(grammar, contexts, budget)
        log["always_never"].append({"context": contexts[0][0].key(grammar), "rows": len(contexts[0][1]),
                                    "cpu_s": round(time.process_time() - t0, 3)})
        return out

    def timed_bar_hillel(ctx, seq):
        t0 = time.process_time()
        out = bar_hillel_work(ctx, seq)
        log["bar_hillel"].append({"context": ctx.key(g), "length": len(seq), "cpu_s": round(time.process_time() - t0, 3)})
        return out

    def timed_jointly_legal(grammar, contexts, budget):
        keys = [c.key(grammar) for c, _ in contexts]
        on = prof is not None and profile_batch in keys
        t0 = time.process_time()
        if on:
            prof.enable()
        out = jointly_legal(grammar, contexts, budget)
        if on:
            prof.disable()
        log["jointly_legal"].append({"contexts": keys, "rows": sum(len(s) for _, s in contexts),
                                     "cpu_s": round(time.process_time() - t0, 3), "steps": explorer(grammar).steps})
        return out

    S._always_never, S._jointly_legal, S._bar_hillel_work = timed_always_never, timed_jointly_legal, timed_bar_hillel
    try:
        sl.processes = 1
        sl.stats = defaultdict(int)
        t0, c0 = time.perf_counter(), time.process_time()
        decisions = sl._decide(pairs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        S._always_never, S._jointly_legal, S._bar_hillel_work = always_never, jointly_legal, bar_hillel_work
    if prof is not None and profile_out:
        prof.dump_stats(profile_out)
    canon = sorted([c.key(g), list(s), d.value if isinstance(d, S.Decision) else list(d)] for (c, s), d in decisions.items())
    return {
        "model": model,
        "pairs": len(pairs),
        "contexts": len({c for c, _ in pairs}),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "always_never_cpu_s": round(sum(x["cpu_s"] for x in log["always_never"]), 2),
        "bar_hillel_cpu_s": round(sum(x["cpu_s"] for x in log["bar_hillel"]), 2),
        "jointly_legal_cpu_s": round(sum(x["cpu_s"] for x in log["jointly_legal"]), 2),
        "jointly_legal_steps": sum(x["steps"] for x in log["jointly_legal"]),
        "decisions_sha256": hashlib.sha256(json.dumps(canon).encode()).hexdigest()[:16],
        "stats": dict(sl.stats),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tasks": log,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--profile-batch", help="the batch holding this context (`Context.key`) under cProfile")
    ap.add_argument("--profile", help="where the profile goes (with --profile-batch)")
    a = ap.parse_args()
    if a.profile_batch and not a.profile:
        ap.error("--profile-batch needs --profile")
    out = {"uptime_start": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    out["models"] = [measure(m, a.profile_batch, a.profile) for m in a.models]
    out["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
