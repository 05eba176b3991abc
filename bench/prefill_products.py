"""The products of a prompt chunk, by element type: is bfloat16 worth a prefill path? (prints JSON)

    .venv/bin/python bench/prefill_products.py [--rows 128] [--reps 20] [--spin]

One chunk of a prompt (`kv_cache.PREFILL_CHUNK` rows) times each of a SmolLM2-135M decoder
layer's seven projections (q, k, v, o, gate, up, down: their shapes from the default model's
config), summed over the seven, p50 of `--reps`, in three ways:
- `half_kernel`: what the prefill runs, float32 rows times the float16 weights (`half_matmul`);
- `torch_f32`: PyTorch's float32 product (MKL/oneDNN) with float32 copies of the weights;
- `torch_bf16`: PyTorch's bfloat16 product with bfloat16 rows and weights (oneDNN, which uses
  AVX-512 BF16 where the CPU has it, as `cpu_flags` reports).
Also each one's largest difference from the float64 product (`max_abs_err`). Threads wait as the
server's do (`OMP_WAIT_POLICY=PASSIVE`) unless `--spin`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--spin", action="store_true", help="libgomp's default waits instead of PASSIVE")
    args = ap.parse_args(argv)
    if not args.spin:
        from lsp_server.threads import use_fair_threads

        use_fair_threads()
    import torch

    from lsp_server.model.kernels.build import cpu_flags, load

    kernels = load()
    if kernels is None:
        print(json.dumps({"error": "the kernels can't be built here"}))
        return 1
    e, f, heads, kv_heads, d = 576, 1536, 9, 3, 64  # SmolLM2-135M
    shapes = {"q": (heads * d, e), "k": (kv_heads * d, e), "v": (kv_heads * d, e), "o": (e, heads * d),
              "gate": (f, e), "up": (f, e), "down": (e, f)}
    gen = torch.Generator().manual_seed(0)
    weights = {n: (torch.randn(s, generator=gen) * 0.05).half() for n, s in shapes.items()}
    rows = {n: torch.randn(args.rows, s[1], generator=gen) for n, s in shapes.items()}
    ways = {
        "half_kernel": (lambda n: rows[n], lambda n: weights[n], lambda x, w: kernels.half_matmul(x, w)),
        "torch_f32": (lambda n: rows[n], lambda n: weights[n].float(), lambda x, w: x @ w.t()),
        "torch_bf16": (lambda n: rows[n].bfloat16(), lambda n: weights[n].bfloat16(), lambda x, w: x @ w.t()),
    }
    report = {"rows": args.rows, "threads": torch.get_num_threads(), "avx512_bf16": "avx512_bf16" in cpu_flags(),
              "mkldnn_available": bool(torch.backends.mkldnn.is_available()), "ways": {}}
    with torch.inference_mode():
        for name, (x_of, w_of, product) in ways.items():
            xs, ws = {n: x_of(n) for n in shapes}, {n: w_of(n) for n in shapes}
            err = max(float((product(xs[n], ws[n]).double() - rows[n].double() @ weights[n].double().t()).abs().max())
                      for n in shapes)
            times = []
            for rep in range(args.reps + 3):
                t0 = time.perf_counter()
                for n in shapes:
                    product(xs[n], ws[n])
                if rep >= 3:
                    times.append((time.perf_counter() - t0) * 1000)
            report["ways"][name] = {"ms_per_layer_p50": round(float(np.percentile(times, 50)), 3),
                                    "ms_per_row_per_layer": round(float(np.percentile(times, 50)) / args.rows, 4),
                                    "max_abs_err": err}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
