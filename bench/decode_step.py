"""Cost of a decoding step and of verification passes, by how the model runs (prints JSON).

    .venv/bin/python bench/decode_step.py [--model default] [--context 1000] [--reps 10] [--rounds 1] [--spin]

The default model after a prompt of `--context` tokens of typing.py; the milliseconds (p50 over
`--reps`) of one forward pass over n = 1..9 new tokens, the cache cropped back after each, for:
- `kernels`: the one copy of the weights (float16, or a GGUF's blocks: `weights_mib` says
  which) through `decode_kernels` (products and attention), transformers' layer code around them;
- `fused`: the runtime as `load_model` makes it (kernels + `fused_layers`, or `cpu_decoder`,
  whose layers call the same kernels: then `kernels` is not measured);
- with `cpu_decoder`, the same weights three more ways, each lever of its step alone:
  `f32_kv` (a float32 KV cache), `per_layer` (one kernel call per layer) and
  `per_layer_f32_kv` (both: the step as it was before the float16 cache and the one-call step).
The configurations are measured in turn, `--rounds` times (interleaved: a change of load hits
them alike); each figure is the p50 over all rounds.
(The float32 weights and PyTorch's products are gone from the runtime: `half_weights`.) Also
the prompt's cost (ms per prompt token, p50 over 3 passes; `prompt_in_chunks_ms_per_token`:
as a request computes it, through `PromptCache` in chunks of `PREFILL_CHUNK`, the KV buffers
growing as they do in the server) and whether a pass over 8 tokens
gives, row for row, the bits of 8 single steps (what keeps speculative decoding's output
identical), per configuration. OpenMP's threads wait as the server's do (`OMP_WAIT_POLICY=PASSIVE`,
`lsp_server/threads.py`: a thread waiting between parallel regions sleeps), unless `--spin`
(libgomp's default: they spin, faster on an idle machine, unfair on a busy one); the report
says which.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import STDLIB  # noqa: E402


def configure(runtime, name: str, pristine_forward) -> None:
    """Put the loaded runtime's model into configuration `name` (see the module doc)."""
    for layer, forward in pristine_forward.items():
        layer.__dict__.pop("forward", None)  # the class's own forward
        if name == "fused":
            layer.forward = forward


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--context", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1, help="times each configuration is measured, in turn")
    ap.add_argument("--spin", action="store_true",
                    help="libgomp's default waits (spinning) instead of the server's OMP_WAIT_POLICY=PASSIVE")
    args = ap.parse_args(argv)

    if not args.spin:
        from lsp_server.threads import use_fair_threads

        use_fair_threads()  # before torch loads, as the CLI does
    import torch

    from lsp_server.model.cpu_decoder import CpuDecoder, load_cpu_decoder
    from lsp_server.model.kv_cache import rewind
    from lsp_server.model.memory_parts import model_bytes
    from lsp_server.model.kv_cache import PromptCache
    from lsp_server.model.runtime import load_model

    runtime = load_model(args.model)
    # the fused forwards load_model installed, to put back for the `fused` configuration
    fused = {m: m.__dict__["forward"] for m in runtime.model.modules() if "forward" in m.__dict__}
    ids = runtime.tokenizer.tokenizer.encode((STDLIB / "typing.py").read_text()).ids
    ids = ids[: args.context + 16]
    from lsp_server.model.kernels.build import load

    kernels = load()
    report = {"model": runtime.name, "context": args.context, "threads": torch.get_num_threads(),
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "libgomp's default (spinning)"),
              "kernels": kernels.isa if kernels else None, "rounds": args.rounds,
              "fused_layers": len(fused), "runtime_model": type(runtime.model).__name__,
              "weights_mib": {k: round(v / 2**20, 1) for k, v in model_bytes(runtime.model).items()},
              "configurations": {}}
    runtimes = {}
    if isinstance(runtime.model, CpuDecoder):
        from mask_store.model_files import resolve_model

        # `cpu_decoder` (the CPU runtime without transformers' classes) has no `kernels` configuration:
        # its layers call the fused kernel themselves, as `fused` does
        wdir = resolve_model(args.model).path
        runtimes = {"fused": runtime}
        for name, kv, one_call in (("f32_kv", torch.float32, True), ("per_layer", torch.float16, False),
                                   ("per_layer_f32_kv", torch.float32, False)):
            runtimes[name] = replace(runtime, model=load_cpu_decoder(wdir, kernels, kv, one_call))
        report["kv_dtype"] = str(runtime.model.kv_dtype)
    elif kernels is not None:  # the kernels could not be built here: the runtime is float32 PyTorch
        runtimes = {name: runtime for name in (("kernels", "fused") if fused else ("fused",))}
    times = {name: {"prompt": [], "chunked": [], **{str(n): [] for n in range(1, 10)}} for name in runtimes}
    for _ in range(args.rounds):
        for name, rt in runtimes.items():
            configure(rt, name, fused)
            got = times[name]
            for _ in range(3):
                t0 = time.perf_counter()
                _, past = rt.forward(ids[: args.context], None)
                got["prompt"].append((time.perf_counter() - t0) * 1000 / args.context)
            for rep in range(3):
                cache = PromptCache(rt)
                t0 = time.perf_counter()
                cache.prefill(f"doc{rep}", ids[: args.context])
                got["chunked"].append((time.perf_counter() - t0) * 1000 / args.context)
            for n in range(1, 10):
                for rep in range(args.reps + 2):
                    t0 = time.perf_counter()
                    rt.forward(ids[args.context : args.context + n], past, keep=n)
                    if rep >= 2:
                        got[str(n)].append((time.perf_counter() - t0) * 1000)
                    rewind(past, args.context)
            print(name, {n: round(float(np.percentile(got[str(n)], 50)), 1) for n in ("1", "4", "8")},
                  file=sys.stderr, flush=True)
    for name, rt in runtimes.items():
        configure(rt, name, fused)
        _, past = rt.forward(ids[: args.context], None)
        together, _ = rt.forward(ids[args.context : args.context + 8], past, keep=8)
        rewind(past, args.context)
        same = 0
        for j in range(8):
            row, _ = rt.forward(ids[args.context + j : args.context + j + 1], past, keep=1)
            same += bool(torch.equal(row[0], together[j]))
        rewind(past, args.context)
        got = times[name]
        report["configurations"][name] = {
            "ms_by_tokens": {str(n): round(float(np.percentile(got[str(n)], 50)), 1) for n in range(1, 10)},
            "verification_rows_identical": f"{same}/8",
            "prompt_ms_per_token": round(float(np.percentile(got["prompt"], 50)), 3),
            "prompt_in_chunks_ms_per_token": round(float(np.percentile(got["chunked"], 50)), 3),
        }
        if name != "fused" and "fused" in runtimes:  # the logits' difference from the runtime's own
            mine, _ = runtimes["fused"].forward(ids[: args.context + 8], None, keep=9)
            theirs, _ = rt.forward(ids[: args.context + 8], None, keep=9)
            report["configurations"][name]["max_abs_logit_diff_vs_fused"] = float((mine - theirs).abs().max())
            report["configurations"][name]["same_argmax_vs_fused"] = bool(torch.equal(mine.argmax(-1),
                                                                                      theirs.argmax(-1)))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
