"""llama.cpp's speed on a GGUF file: the yardstick that makes latency figures comparable.

    .venv/bin/python bench/llama_cpp_anchor.py [--model default|FILE.gguf] [--prompt-tokens 512]
                                               [--decode-tokens 64]        # prints JSON

    from llama_cpp_anchor import anchor_in_child, in_units
    anchor = anchor_in_child(path)                 # in a fresh process, alone on the machine
    report = in_units(report, anchor["decode_ms_per_token"])

llama.cpp (the `xllamacpp` wheel, 2 threads, the same file as ours) computes a prompt of
`--prompt-tokens` tokens of a stdlib file (`typing.py`) and decodes `--decode-tokens` tokens
after it, greedy and unconstrained, three times; its prompt and decode ms per token are the p50
of the three. Machines of the same kind differ up to 2x per token (issue 44: two 2-core AVX-512
machines computed prompts at 1.07 and 2.4 ms per token): a latency given as a multiple of L =
llama.cpp's decode ms per token, measured in the same run, compares across machines where
milliseconds do not. Measure it alone: its two threads wait for each other, and beside a test
run (load 1.5-3.4) it took 252 ms per token instead of 16-26. `bench/model_file.py` sets our own decode
against the same figure; `bench/lsp_latency.py` gives every latency in units of L (`in_units`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import STDLIB, child_json  # noqa: E402

PROMPT_FILE = STDLIB / "typing.py"
THREADS = 2


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def p50(values) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def prompt_of(path: Path, tokens: int) -> tuple[str, list[int]]:
    """The first `tokens` tokens of `PROMPT_FILE` in the model's own tokenizer: the text (so that
    llama.cpp reads as many) and the ids."""
    from mask_store.vocabulary import load_tokenizer

    tok = load_tokenizer(str(path))
    ids = tok.encode(PROMPT_FILE.read_text())[:tokens]
    return tok.tokenizer.decode(ids), ids


def measure(path: str, text: str, decode_tokens: int, prompt_text_ids: list[int] | None = None) -> dict:
    """llama.cpp on `path`: load seconds, resident MiB, its prompt ms per token on `text` and its
    decode ms per generated token (`decode_tokens`, greedy, p50 of 3); with `prompt_text_ids`,
    also its 32 greedy tokens after them (`greedy_ids`)."""
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = path
    p.n_ctx = 4096
    p.n_batch = 512
    p.cpuparams.n_threads = THREADS
    p.cpuparams_batch.n_threads = THREADS
    p.n_parallel = 1
    t = time.perf_counter()
    server = xlc.Server(p)
    load_s = time.perf_counter() - t
    rss_loaded = rss_mib()
    prompt, decode = [], []
    n_prompt = 0
    for _ in range(3):
        r = server.handle_completions({"prompt": text, "n_predict": decode_tokens, "temperature": 0,
                                       "ignore_eos": True, "cache_prompt": False})
        timings = r["timings"]
        n_prompt = timings["prompt_n"]
        prompt.append(timings["prompt_per_token_ms"])
        decode.append(timings["predicted_per_token_ms"])
    out = {"load_s": round(load_s, 2), "rss_mib_after_load": rss_loaded, "rss_mib_after_requests": rss_mib(),
           "prompt_tokens": n_prompt, "prompt_ms_per_token": round(p50(prompt), 3),
           "decode_ms_per_token": round(p50(decode), 2), "decode_tokens": decode_tokens,
           "system_info": xlc.get_system_info().strip()}
    if prompt_text_ids:
        r = server.handle_completions({"prompt": prompt_text_ids, "n_predict": 32, "temperature": 0, "n_probs": 1,
                                       "ignore_eos": True, "cache_prompt": False})
        out["greedy_ids"] = [c["id"] for c in r["choices"][0]["logprobs"]["content"]]
    return out


def anchor_in_child(path: Path, prompt_tokens: int = 512, decode_tokens: int = 64) -> dict:
    """`measure` on `path` in a fresh process (its memory and threads its own; nothing else of
    ours runs meanwhile), with the machine's load average when it started and ended. The child
    runs llama.cpp as its users do: without our server's thread settings (`FAIR_ENVIRONMENT`,
    which a benchmark that imports the server has set in its own environment: llama.cpp's OpenMP
    threads under OMP_WAIT_POLICY=PASSIVE decode SmolLM2 at ~29 ms a token instead of ~13)."""
    from lsp_server.threads import FAIR_ENVIRONMENT

    load = [round(x, 2) for x in os.getloadavg()]
    out = child_json([sys.executable, __file__, "--model", str(path), "--prompt-tokens", str(prompt_tokens),
                      "--decode-tokens", str(decode_tokens)], without=tuple(FAIR_ENVIRONMENT))
    return out | {"file": str(path), "threads": THREADS,
                  "load_average": {"before": load, "after": [round(x, 2) for x in os.getloadavg()]}}


def in_units(tree, unit_ms: float):
    """`tree` (a benchmark's JSON) with every figure in ms also in units of `unit_ms`: beside each
    key `NAME_ms` (and `ms`) holding a number, `NAME_L` (`L`) = that number / `unit_ms`."""
    if isinstance(tree, list):
        return [in_units(x, unit_ms) for x in tree]
    if not isinstance(tree, dict):
        return tree
    out = {}
    for key, value in tree.items():
        out[key] = in_units(value, unit_ms)
        if (key == "ms" or key.endswith("_ms")) and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key[:-2] + "L"] = round(value / unit_ms, 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="default", help="default (SmolLM2-135M's file) or a .gguf file")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    from mask_store.model_files import resolve_model

    src = resolve_model(args.model)
    if src.kind != "gguf":
        raise SystemExit(f"llama.cpp reads GGUF files; {src.path} is a {src.kind}")
    text, _ = prompt_of(src.path, args.prompt_tokens)
    print(json.dumps(measure(str(src.path), text, args.decode_tokens)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
