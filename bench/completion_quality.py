"""Completion quality and speed, constrained vs unconstrained, on the same cut points of a code set.

For each cut point (fixed seed; line starts and mid-line points, inside and outside blocks) the
file is cut at the cursor, the rest of that line is dropped, the following lines are kept
(DESIGN.md §7). Both modes complete it with the same model and a warm KV cache (a one-token
request on the same document first, as when the user is typing). Reported per mode:
- parses_after_accept: the completion spliced in place of the rest of the line, the following
  lines kept, CPython compiles the file (`compile(text, name, "exec")`:
  grammar_tools/parsing/cpython_check.py) -- over the non-empty answers (what a user
  can accept); parses_all_cuts: the same over every cut point (an empty answer leaves the cut
  file, which rarely parses, as it is);
- exact_match / edit_similarity of the completion's first line against the original rest of line;
- empty: the share of empty answers;
- echoes_next_line: the share of cut points whose completion's last non-blank line (read whole:
  the cursor's line before it when it is the completion's first) equals the file's next non-blank
  line, both stripped -- accepting it would repeat that line (issue 23; target 0), and its count;
- tokens_per_s (decoding only), mask_ms p50/p99 per step, latency_ms p50/p90 (request end to end),
  also per stopping policy (single-line / multi-line: a line-start cut inside a block is a
  blank line there, where the engine writes the block's next lines);
and by cut class (line-start/mid-line x top-level/in-block).

    .venv/bin/python bench/completion_quality.py --cuts 300 [--code stdlib|thirdparty] [--model default]
        [--out cuts.jsonl] [--speculation [--draft-model DIR]] [--modes constrained --replay cuts.jsonl]
        [--modes constrained --oracle]

`--code thirdparty` cuts the files of pinned third-party wheels (bench/_util.py: downloaded into
the user cache on first use) instead of the stdlib: mechanisms are decided on the stdlib and
confirmed there.

With `--speculation`, also constrained decoding with speculation: its speed-up over both, by cut
class and by draft source (`by_source`: the steps each source drafted, timed in the same run).

Canonical tokenization (mask_store.canonical, on by default) is on in the constrained modes;
`--canonical-ab` also runs each constrained mode with it off (`.../no-canonical`) on the same cut
points. Per mode: `noncanonical`, the share of completions whose generated tokens differ from the
tokenizer's own encoding of the prompt's kept text followed by their text and a letter (the last
token left out: where the text ends is not where the document does), `canonical_fallbacks` (steps whose
canonical AND left nothing, over all mask steps), tokens per completion and, with speculation, α
(accepted over drafted positions).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsp_server.threads import use_fair_threads  # noqa: E402

use_fair_threads()  # before torch loads libgomp, as the CLI does: waiting threads sleep on a busy machine

import numpy as np  # noqa: E402
from _util import CODE_SETS, code_files, relative_name  # noqa: E402

from grammar_tools.parsing.cpython_check import compiles  # noqa: E402


def percentile(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


STDLIB = Path(sysconfig.get_paths()["stdlib"])


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein distance / longer length (1.0 for two empty strings)."""
    if not a and not b:
        return 1.0
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return 1.0 - prev[-1] / max(len(a), len(b))


def echoes_next_line(lines: list[str], i: int, ch: int, text: str) -> bool:
    """Whether the completion `text` at line `i`, column `ch` ends with the file's next
    non-blank line (the completion's last non-blank line read whole, both stripped)."""
    if not text.strip():
        return False
    last = next(ln.strip() for ln in reversed((lines[i][:ch] + text).split("\n")) if ln.strip())
    return last == next((ln.strip() for ln in lines[i + 1 :] if ln.strip()), None)



def candidate_files(code: str = "stdlib") -> list[Path]:
    out = []
    for p in sorted(STDLIB.rglob("*.py")) if code == "stdlib" else code_files(code):
        rel = p.relative_to(STDLIB).parts if code == "stdlib" else ()
        if rel and (rel[0] in ("site-packages", "test", "idlelib", "lib2to3", "tkinter") or "tests" in rel):
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if 2_000 < len(text) < 200_000 and compiles(text):
            out.append(p)
    return out


def cut_points(n: int, seed: int, code: str = "stdlib") -> list[dict]:
    rng = random.Random(seed)
    files = candidate_files(code)
    cuts: list[dict] = []
    seen = set()
    while len(cuts) < n:
        p = rng.choice(files)
        lines = p.read_text(encoding="utf-8").split("\n")
        i = rng.randrange(len(lines))
        line = lines[i]
        s = line.strip()
        if not s or s.startswith("#") or len(s) < 4:
            continue
        indent = len(line) - len(line.lstrip())
        if rng.random() < 0.5:
            ch, kind = indent, "line-start"
        else:
            ch, kind = rng.randrange(indent + 1, len(line)), "mid-line"
        if (p, i, ch) in seen:
            continue
        seen.add((p, i, ch))
        cuts.append({"path": str(p), "line": i, "character": ch, "kind": kind,
                     "block": "in-block" if indent else "top-level"})
    return cuts


MODES = {  # name: (constrained, speculative, canonical), run in this order per cut point
    "constrained": (True, False, True),
    # right after `constrained`, on the KV cache it left: an unconstrained request between them
    # changes the prompt (no healing) and the next one re-computes the prompt's end in a pass of
    # its own (a short pass's int8 products, likely other bits than the prompt's float ones):
    # 8 of 40 third-party greedy answers differed that way, none with the two back to back
    "constrained+speculative": (True, True, True),
    "unconstrained": (False, False, False),
    "constrained/no-canonical": (True, False, False),
    "constrained+speculative/no-canonical": (True, True, False),
}


def noncanonical(tok, kept: list[int], generated: list[int]) -> bool | None:
    """Whether `generated` (after the prompt's `kept` ids) differs from the tokenizer's own
    encoding of that text followed by a letter (the document goes on: a whitespace run at the
    end is cut as before a statement, not as at the end of a file), its last token left out
    (the letter may merge with it; None: fewer than two tokens)."""
    tb = tok.vocab.token_bytes
    gen = list(generated)
    while gen:  # a completion cut inside a multi-byte character: its whole characters only
        try:
            text = b"".join(tb[t] for t in kept + gen).decode()
            break
        except UnicodeDecodeError:
            gen.pop()
    if len(gen) < 2:
        return None
    enc = tok.encode(text + "x")
    n = len(kept)
    return enc[:n] != kept or enc[n : n + len(gen) - 1] != gen[:-1]


def run(engine, cut: dict, constrained: bool, max_tokens: int, speculative: bool = False,
        canonical: bool = True, first_request: bool = False, budget_ms: float = 0.0) -> dict:
    """One cut point's completion: after the document's full prompt window was computed (as the
    work ahead leaves it), or with `first_request` as the first request in the document (a
    short first window: `parts.request_window`); `budget_ms`: the request's latency budget
    (0: none)."""
    from lsp_server.decoding.budget import Budget
    from lsp_server.decoding.engine import CompletionRequest
    from lsp_server.decoding.prompt import FIRST_WINDOW_STEP, WINDOW_STEP, build_prompt

    lines = Path(cut["path"]).read_text(encoding="utf-8").split("\n")
    i, ch = cut["line"], cut["character"]
    reference = lines[i][ch:]
    doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
    opts = engine.options.updated(constrained=constrained, max_tokens=max_tokens, speculative=speculative,
                                  canonical=canonical)
    if first_request:
        engine.forget(cut["path"])
    t0 = time.perf_counter()
    req = CompletionRequest.at(doc, i, ch, document=cut["path"], short_first=first_request,
                               budget=Budget.of(budget_ms, start=t0))
    r = engine.complete(req, options=opts)
    latency = (time.perf_counter() - t0) * 1000
    before = "\n".join(lines[:i] + [lines[i][:ch]])
    budget, step = (opts.first_window_tokens, FIRST_WINDOW_STEP) if r.short_window else (opts.context_tokens,
                                                                                        WINDOW_STEP)
    prompt = build_prompt(engine.tokenizer, before, doc[len(before) :], budget, engine.runtime.fim,
                          heal=constrained, heal_pretoken=r.figures.canonical, step=step)  # as the engine built it
    kept = prompt.prefix
    # the cut document has nothing after the cursor on its line: the replace range is empty
    spliced = "\n".join(lines[:i] + [lines[i][:ch] + r.text] + lines[i + 1 :])
    first = r.text.split("\n")[0].rstrip()
    ref_first = reference.rstrip()
    n_tokens = r.figures.tokens_generated + r.figures.tokens_forced
    return {
        "parses": compiles(spliced),
        "exact": first == ref_first,
        "similarity": edit_similarity(first, ref_first),
        "empty": not r.text.strip(),
        "echo": echoes_next_line(lines, i, ch, r.text),
        "tokens": n_tokens,
        "decode_ms": r.figures.decode_ms,
        "mask_ms": r.figures.mask_ms,
        "latency_ms": latency,
        "stop": r.stop_reason,
        "offer_path": r.offer_path,  # which step of the validity search gave the text (decoding/model_pass.py: `choose_offer`)
        "short_window": r.short_window,
        "check_ms": r.figures.check_ms,  # the whole-file checks' time in the request
        "policy": r.mode,  # the engine's stopping mode: single-line or multi-line
        "text": r.text,
        "speculation": (r.figures.speculation or {}).get("request"),
        "names_ready": r.figures.names_ready,  # the names guide shaped this request's steps (its analysis was ready)
        "times_ms": r.figures.times_ms,  # the request's parts (model, mask, checks, names...: results.RequestTimes)
        "noncanonical": noncanonical(engine.tokenizer, kept, r.token_ids),
        "canonical_fallbacks": r.figures.canonical_fallbacks,
        "token_ids": r.token_ids,
    }


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    offered = [r for r in rows if not r["empty"]]
    masks = [m for r in rows for m in r["mask_ms"]]
    tokens = sum(r["tokens"] for r in rows)
    decode_s = sum(r["decode_ms"] for r in rows) / 1000
    lat = [r["latency_ms"] for r in rows]
    stops: dict[str, int] = {}
    paths: dict[str, int] = {}
    for r in rows:
        stops[r["stop"]] = stops.get(r["stop"], 0) + 1
        paths[r["offer_path"]] = paths.get(r["offer_path"], 0) + 1
    checks = [r["check_ms"] for r in rows]
    judged = [r["noncanonical"] for r in rows if r["noncanonical"] is not None]
    drafted = sum((r["speculation"] or {}).get("drafted", 0) for r in rows)
    accepted = sum((r["speculation"] or {}).get("accepted", 0) for r in rows)
    return {
        "cuts": n,
        # accepting a suggestion (an empty answer offers nothing to accept)...
        "parses_after_accept": round(sum(r["parses"] for r in offered) / len(offered), 4) if offered else None,
        # ...and over every cut point, an empty answer leaving the cut file as it is
        "parses_all_cuts": round(sum(r["parses"] for r in rows) / n, 4),
        "exact_match": round(sum(r["exact"] for r in rows) / n, 4),
        "edit_similarity": round(sum(r["similarity"] for r in rows) / n, 4),
        "empty": round(sum(r["empty"] for r in rows) / n, 4),
        "short_windows": sum(r["short_window"] for r in rows),  # answered from a first window (--first-request)
        "echoes_next_line": round(sum(r["echo"] for r in rows) / n, 4),
        "echoes_next_line_count": f"{sum(r['echo'] for r in rows)}/{n}",
        "tokens_per_s": round(tokens / decode_s, 2) if decode_s else None,
        "mask_ms_p50": round(percentile(masks, 50), 4) if masks else None,
        "mask_ms_p99": round(percentile(masks, 99), 4) if masks else None,
        "latency_ms_p50": round(percentile(lat, 50), 1),
        "latency_ms_p90": round(percentile(lat, 90), 1),
        # the latency target is for single-line completions; multi-line ones write whole blocks
        "latency_ms_p50_by_policy": {
            p: {"cuts": len(v), "p50": round(percentile(v, 50), 1), "p90": round(percentile(v, 90), 1)}
            for p, v in sorted(_by_policy(rows).items())
        },
        "stops": stops,
        "offer_paths": paths,
        "check_ms_p50": round(percentile(checks, 50), 2),
        "check_ms_p90": round(percentile(checks, 90), 2),
        "tokens_per_completion": round(tokens / n, 2),
        "noncanonical": round(sum(judged) / len(judged), 4) if judged else None,
        "noncanonical_completions": f"{sum(judged)}/{len(judged)}",
        "canonical_fallbacks": f"{sum(r['canonical_fallbacks'] for r in rows)}/{len(masks)} mask steps",
        **({"alpha": round(accepted / drafted, 4)} if drafted else {}),
    }


def _by_policy(rows: list[dict]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in rows:
        out.setdefault(r["policy"], []).append(r["latency_ms"])
    return out


def speedup(plain: list[dict], spec: list[dict]) -> float | None:
    """Tokens per second of decoding with speculation over without (same cut points)."""
    t_plain = sum(r["decode_ms"] for r in plain)
    t_spec = sum(r["decode_ms"] for r in spec)
    n_plain = sum(r["tokens"] for r in plain)
    n_spec = sum(r["tokens"] for r in spec)
    if not t_plain or not t_spec or not n_plain:
        return None
    return round((n_spec / t_spec) / (n_plain / t_plain), 3)


def source_of(key: str) -> str:
    """A step's draft key ("lookup/n3", "lookup/n2-doc", "draft-model", "plain") -> its source
    as the issue names them: prompt lookup (the prompt and the output so far), lookup in the
    rest of the document, the draft model, or no draft."""
    if key.startswith("lookup/"):
        return "lookup-document" if key.endswith("-doc") else "lookup-prompt"
    return key


def steps_report(spec: list[dict], plain_run: list[dict], engine) -> dict:
    """Per draft source (and per lookup match length): the decoding steps it drafted, the
    tokens they committed, their time per token (mask, draft, verification pass, choices) and
    its speed-up over constrained decoding without speculation on the same cut points (its
    time per token), the mean γ chosen, and α and c as the speculator estimated them. `plain`
    is the steps that drafted nothing (a request's first step among them: it has the prompt's
    logits, no forward pass)."""
    tallies: dict[str, dict[str, float]] = {}
    stepped = 0  # tokens committed by steps (each key once: a source's row sums its kinds)
    for r in spec:
        for key, t in ((r["speculation"] or {}).get("steps") or {}).items():
            stepped += t["tokens"]
            for name in {key, source_of(key)}:
                agg = tallies.setdefault(name, {"steps": 0, "tokens": 0, "gamma": 0, "ms": 0.0})
                for field in agg:
                    agg[field] += t[field]
    plain_tokens = sum(r["tokens"] for r in plain_run)
    plain_ms = sum(r["decode_ms"] for r in plain_run) / plain_tokens if plain_tokens else None
    estimates = engine.spec_stats.to_json()["sources"]
    out = {}
    for name, t in sorted(tallies.items()):
        ms_per_token = t["ms"] / t["tokens"] if t["tokens"] else None
        row = {
            "steps": t["steps"],
            "tokens": t["tokens"],
            "tokens_per_step": round(t["tokens"] / t["steps"], 3) if t["steps"] else None,
            "ms_per_token": round(ms_per_token, 2) if ms_per_token else None,
            "speedup_over_constrained": round(plain_ms / ms_per_token, 3) if plain_ms and ms_per_token else None,
        }
        if name != "plain":
            row["gamma_mean"] = round(t["gamma"] / t["steps"], 2) if t["steps"] else None
        if name in estimates:
            row["alpha"], row["c"] = estimates[name]["alpha"], estimates[name]["c"]
        out[name] = row
    # tokens no step paid for: the grammar left a single token outside any draft (fast-forward)
    out["fast-forward"] = {"tokens": sum(r["tokens"] for r in spec) - stepped}
    return out


def acceptance(rows: list[dict]) -> dict:
    """Speculation's yield over `rows` (one mode's requests): drafts verified, positions drafted
    and accepted, α (accepted over drafted), accepted positions per draft, tokens committed per
    verification pass (a draft's accepted positions, the forced ones among them, and the
    target's own token after them), the mean γ chosen, the steps that drafted nothing and the
    declined proposals' trials among them."""
    drafts = drafted = accepted = steps = tokens = gamma = plain = probed = hits = 0
    for r in rows:
        s = r["speculation"] or {}
        drafts += s.get("drafts", 0)
        drafted += s.get("drafted", 0)
        accepted += s.get("accepted", 0)
        probed += s.get("probed", 0)
        hits += s.get("probe_hits", 0)
        for key, t in (s.get("steps") or {}).items():
            if key == "plain":
                plain += t["steps"]
            else:
                steps, tokens, gamma = steps + t["steps"], tokens + t["tokens"], gamma + t["gamma"]
    return {
        "cuts": len(rows),
        "drafts": drafts,
        "drafted": drafted,
        "accepted": accepted,
        "alpha": round(accepted / drafted, 3) if drafted else None,
        "accepted_per_draft": round(accepted / drafts, 3) if drafts else None,
        "tokens_per_verify": round(tokens / steps, 3) if steps else None,
        "gamma_mean": round(gamma / steps, 2) if steps else None,
        "plain_steps": plain,
        # steps that drafted nothing where the lookup proposed a token the step allowed: how
        # often the target took that token anyway (the speculator's estimates learn from them)
        "probed": probed,
        "probe_hit_rate": round(hits / probed, 3) if probed else None,
    }


def by_offer_path(rows: list[dict]) -> dict:
    """`acceptance` per offer path (decoding/model_pass.py, `choose_offer`: which step of the validity search gave
    the text), and over all rows."""
    paths: dict[str, list[dict]] = {}
    for r in rows:
        paths.setdefault(r["offer_path"], []).append(r)
    return {"all": acceptance(rows), **{p: acceptance(v) for p, v in sorted(paths.items())}}


def speculation_report(results, by_class, engine) -> dict:
    spec = results["constrained+speculative"]
    same = sum(a["text"] == b["text"] for a, b in zip(spec, results["constrained"]))
    drafted = sum((r["speculation"] or {}).get("drafted", 0) for r in spec)
    accepted = sum((r["speculation"] or {}).get("accepted", 0) for r in spec)
    return {
        "speedup_over_constrained": speedup(results["constrained"], spec),
        "speedup_over_unconstrained": speedup(results["unconstrained"], spec) if "unconstrained" in results else None,
        "speedup_by_class": {c: speedup(d["constrained"], d["constrained+speculative"]) for c, d in sorted(by_class.items())},
        "identical_outputs": f"{same}/{len(spec)}",
        "drafted_positions": drafted,
        "accepted_positions": accepted,
        "by_source": steps_report(spec, results["constrained"], engine),
        "by_offer_path": by_offer_path(spec),
        "estimates": engine.spec_stats.to_json(),
    }


def canonical_report(results) -> dict:
    """Canonical tokenization on against off, per constrained mode on the same cut points."""
    out = {}
    for on in ("constrained", "constrained+speculative"):
        off = on + "/no-canonical"
        if on not in results or off not in results:
            continue
        a, b = summarize(results[on]), summarize(results[off])
        out[on] = {
            "identical_texts": f"{sum(x['text'] == y['text'] for x, y in zip(results[on], results[off]))}/{len(results[on])}",
            **{k: {"on": a.get(k), "off": b.get(k)} for k in (
                "noncanonical", "exact_match", "edit_similarity", "parses_after_accept", "empty", "tokens_per_s",
                "tokens_per_completion", "mask_ms_p50", "mask_ms_p99", "latency_ms_p50", "alpha") if k in a or k in b},
            "canonical_fallbacks": a["canonical_fallbacks"],
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cuts", type=int, default=300)
    ap.add_argument("--code", default="stdlib", choices=CODE_SETS,
                    help="the code set to cut: the stdlib, or pinned third-party wheels (downloaded once)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--model", default="default")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out", help="write one JSON line per cut point and mode here")
    ap.add_argument("--speculation", action="store_true",
                    help="also run constrained decoding with speculation and report its speed-up")
    ap.add_argument("--draft-model", help="a draft model directory (same tokenizer) as another draft source")
    ap.add_argument("--canonical-ab", action="store_true",
                    help="also run each constrained mode with canonical tokenization off, on the same cut points")
    ap.add_argument("--replay", metavar="RUN.jsonl",
                    help="no model run: each cut point's completion is the tokens an earlier run (--out, same "
                         "cut points) generated, stopped by this code's rules (replay_model.py); quality "
                         "figures only")
    ap.add_argument("--oracle", action="store_true",
                    help="no model: a scripted model (tests/scripted_model.py) writes the file's own text from the "
                         "cursor on (the dropped rest of the line, then the lines the file goes on with), the "
                         "echo at its purest; no speed figures")
    ap.add_argument("--first-request", action="store_true",
                    help="each cut point's request is the first in its document, nothing computed ahead: "
                         "answered as the server answers it then (a short first window of "
                         "firstWindowTokens; docs/latency.md)")
    ap.add_argument("--modes", nargs="+", choices=list(MODES),
                    help="run only these modes (default: as the flags above select)")
    ap.add_argument("--identifiers", default=None, choices=("off", "bias", "constrain"),
                    help="the names guide's mode (default: the engine's); its analysis is made before each cut "
                         "point's requests, so that every mode decodes with it")
    ap.add_argument("--budget-ms", type=float, default=0.0,
                    help="each request's latency budget as the server gives it (latencyBudgetMs; 0: none)")
    ap.add_argument("--forward-ms", metavar="T1,T9",
                    help="speculation's forward costs held at this profile (one token T1 ms, nine T9, linear "
                         "between) instead of measured: its choices, and so its acceptance figures, then do not "
                         "follow the machine's load (speed figures are still measured)")
    args = ap.parse_args(argv)

    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.model.kernels.build import load as load_kernels
    from lsp_server.options import EngineOptions

    if args.oracle:
        from mask_store.loading import load_compiled

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from scripted_model import ScriptedRuntime

        compiled, tok = load_compiled(args.model)
        engine = CompletionEngine(EngineOptions(max_tokens=args.max_tokens), ScriptedRuntime(tok, b""), compiled)
    else:
        engine = CompletionEngine.load(EngineOptions(model=args.model, max_tokens=args.max_tokens,
                                                     draft_model=args.draft_model))
    if args.identifiers:
        engine.options = engine.options.updated(identifiers=args.identifiers)
    if args.forward_ms:
        t1, t9 = (float(v) for v in args.forward_ms.split(","))
        engine.spec_stats.forward_ms.update({n: t1 + (t9 - t1) * (n - 1) / 8 for n in range(1, 11)})
        engine.spec_stats.record_forward = lambda n, ms: None  # held: not learnt from this run's passes
    cuts = cut_points(args.cuts, args.seed, args.code)
    recorded = {}
    if args.replay:
        from replay_model import ReplayRuntime

        with open(args.replay) as f:
            for line in f:
                row = json.loads(line)
                recorded[(row["path"], row["line"], row["character"], row["mode"])] = row["token_ids"]
        real = engine
    modes = args.modes or [m for m in MODES if (args.speculation or "speculative" not in m)
                           and (args.canonical_ab or "no-canonical" not in m)]
    results: dict[str, list[dict]] = {m: [] for m in modes}
    by_class: dict[str, dict[str, list[dict]]] = {}
    out = open(args.out, "w") if args.out else None
    diverged = 0
    for k, cut in enumerate(cuts):
        if args.replay:
            (mode,) = modes
            ids = recorded[(cut["path"], cut["line"], cut["character"], mode)]
            engine = CompletionEngine(real.options, ReplayRuntime(real.runtime, ids), real.compiled)
        elif args.oracle:
            original = Path(cut["path"]).read_bytes()
            engine = CompletionEngine(engine.options, ScriptedRuntime(tok, original), compiled)
        # warm the document's KV cache as typing would
        lines = Path(cut["path"]).read_text(encoding="utf-8").split("\n")
        i, ch = cut["line"], cut["character"]
        doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
        if not args.first_request:
            warm = CompletionRequest.at(doc, i, ch, document=cut["path"], max_tokens=1, short_first=False)
            engine.complete(warm)
            # the names analysis made before the first mode's request (as the server's work ahead
            # does after a pause): without the wait only the later modes would find it ready
            try:
                engine.names_ahead(warm, wait=60.0)
            except TimeoutError:  # jedi slower than that on a busy machine: this cut point decodes without it
                print(f"names analysis not ready after 60 s: {relative_name(Path(cut['path']))}", file=sys.stderr)
        for mode in modes:
            constrained, speculative, canonical = MODES[mode]
            row = run(engine, cut, constrained, args.max_tokens, speculative, canonical, args.first_request,
                      args.budget_ms)
            if args.replay and row["token_ids"] != ids[: len(row["token_ids"])]:
                diverged += 1  # the replay took another token than the real model: not what it would write
            results[mode].append(row)
            cls = f'{cut["kind"]}/{cut["block"]}'
            by_class.setdefault(cls, {m: [] for m in modes})[mode].append(row)
            if out:
                out.write(json.dumps({**cut, "file": relative_name(Path(cut["path"])), "mode": mode, **{k2: v for k2, v in row.items() if k2 != "mask_ms"}}) + "\n")
                out.flush()  # a run stopped early keeps its cut points (replayable with --cuts N)
        engine.forget(cut["path"])
        if out:
            out.flush()  # whole cut points on disk: a run stopped early still has its rows
        if (k + 1) % 25 == 0:
            print(f"{k + 1}/{len(cuts)} cut points", file=sys.stderr, flush=True)
    report = {
        "model": engine.describe()["model"],
        "code": args.code,
        "files": len({c["path"] for c in cuts}),
        "kernels": kernels.isa if (kernels := load_kernels()) else None,  # avx512 / avx2 / PyTorch's
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        **({"replay": args.replay, "replay_diverged": diverged} if args.replay else {}),
        **{m: summarize(results[m]) for m in modes},
        "by_class": {c: {m: summarize(v) for m, v in d.items()} for c, d in sorted(by_class.items())},
    }
    if {"constrained", "constrained+speculative"} <= set(modes):
        report["speculation"] = speculation_report(results, by_class, engine)
    if any("no-canonical" in m for m in modes):
        report["canonical"] = canonical_report(results)
    if "constrained" in report and "unconstrained" in report:
        c, u = report["constrained"], report["unconstrained"]
        report["tokens_per_s_ratio"] = round(c["tokens_per_s"] / u["tokens_per_s"], 3) if u["tokens_per_s"] else None
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
