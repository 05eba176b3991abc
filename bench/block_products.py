"""The kernels' products by weight format, against the machine's memory bandwidth (prints JSON).

    .venv/bin/python bench/block_products.py [--rows 32768] [--cols 2048] [--reps 5]
        [--formats Q8_0,Q4_K,...] [--model FILE.gguf ...] [--spin]

For each storage format the kernels read (`block_weights.WeightFormat`; F16 through
`half_matmul`), a [--rows, --cols] matrix of random blocks (sane float16 scales; F32/BF16:
normal values), bigger than the last-level cache, times float32 rows:
- `m1_gb_s`, `m8_gb_s`: the weights' bytes read per second by a product of 1 row (a decoding
  step) and of 8 rows (a speculative verification): p50 of --reps;
- `m256_ms_per_row`: a prompt's product, 256 rows times the first 4,096 weight rows, in
  milliseconds per row (per prompt token, for that matrix), and its GFLOP/s;
- `int8_m64_ms_per_row` (quantized formats, where the library has `INT8_ROWS`): 64 rows as
  two 32-row products (the int8 path) against one 64-row one (the float path): whether the int8
  path should also serve prompts.
`memory_gb_s`: the bandwidth of reading a 1 GiB float32 tensor (torch.sum, the same threads):
the ceiling of the short products. With `--model`, the products of a decoding step of that
GGUF file (every layer's seven projections and the output projection, the file's own
tensors memory-mapped, in their formats): milliseconds per step for 1 and 8 rows, and the
weights' GB/s. Works against older versions of the kernels (formats they lack are skipped),
for before/after figures. OpenMP's threads wait as the server's do unless `--spin`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import p50  # noqa: E402

# ggml's layouts: values and bytes per block, and where the float16 scales are
LAYOUT = {
    "F32": (1, 4, ()), "BF16": (1, 2, ()), "F16": (1, 2, ()),
    "Q4_0": (32, 18, (0,)), "Q4_1": (32, 20, (0, 2)), "Q5_0": (32, 22, (0,)), "Q5_1": (32, 24, (0, 2)),
    "Q8_0": (32, 34, (0,)), "Q4_K": (256, 144, (0, 2)), "Q5_K": (256, 176, (0, 2)), "Q6_K": (256, 210, (208,)),
}
STEP_TENSORS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def random_matrix(name: str, rows: int, cols: int, rng: np.random.Generator):
    """uint8 [rows, bytes a row] of random blocks with float16 scales in [1e-3, 1e-2] (F32,
    BF16, F16: normal values)."""
    import torch

    values, size, scales = LAYOUT[name]
    if values == 1:
        t = torch.from_numpy(rng.standard_normal((rows, cols), dtype=np.float32))
        t = {"F32": t, "BF16": t.bfloat16(), "F16": t.half()}[name]
        return t.contiguous().view(torch.uint8) if name != "F16" else t
    blocks = rng.integers(0, 256, (rows, cols // values, size), dtype=np.uint8)
    for at in scales:
        d = rng.uniform(1e-3, 1e-2, (rows, cols // values)).astype(np.float16)
        blocks[:, :, at:at + 2] = d.view(np.uint8).reshape(rows, cols // values, 2)
    return torch.from_numpy(blocks.reshape(rows, -1))


def memory_gb_s(reps: int) -> float:
    import torch

    t = torch.ones(2**28)  # 1 GiB
    return round(t.numel() * 4 / p50(lambda: t.sum(), reps) / 1e9, 1)


def model_step(kernels, path: Path, reps: int) -> dict:
    """The products of one decoding step of a GGUF file (1 and 8 rows), its own tensors mapped."""
    import torch
    from gguf import GGUFReader

    from lsp_server.model.kernels.block_weights import BlockMatrix, WeightFormat

    reader = GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    head = tensors.get("output.weight", tensors.get("token_embd.weight"))
    mats, skipped, nbytes = [], set(), 0
    for t in reader.tensors:
        part = t.name.split(".")
        if not (t is head or (len(part) == 4 and part[0] == "blk" and part[2] in STEP_TENSORS
                              and part[3] == "weight")):  # not Qwen's biases
            continue
        fmt = WeightFormat.__members__.get(t.tensor_type.name)
        cols = int(t.shape[0])  # gguf lists the row length first
        raw = torch.from_numpy(np.asarray(t.data).view(np.uint8).reshape(int(t.shape[1]), -1))
        if fmt is None or (fmt.name == "F16"):
            w = raw.view(torch.float16) if fmt is not None else None
        else:
            try:
                w = BlockMatrix.of(raw, fmt, cols)
            except ValueError:
                w = None
        if w is None:
            skipped.add(t.tensor_type.name)
            continue
        mats.append(w)
        nbytes += raw.numel()
    out = {"file": path.name, "matrices": len(mats), "weights_mb": round(nbytes / 1e6, 1),
           "formats_skipped": sorted(skipped)}
    for m in (1, 8):
        xs = [torch.randn(m, w.shape[1]) for w in mats]
        sec = p50(lambda xs=xs: [kernels.matmul(x, w) for x, w in zip(xs, mats)], reps)
        out[f"m{m}_ms_per_step"] = round(sec * 1000, 2)
        out[f"m{m}_gb_s"] = round(nbytes / sec / 1e9, 1)
    return out


def format_figures(kernels, name: str, args, rng: np.random.Generator, int8: bool) -> dict:
    """One format's figures (the module's doc)."""
    import torch

    from lsp_server.model.kernels.block_weights import BlockMatrix, WeightFormat

    fmt = WeightFormat[name]
    raw = random_matrix(name, args.rows, args.cols, rng)
    w = raw if name == "F16" else BlockMatrix.of(raw, fmt, args.cols)
    small = raw[:4096] if name == "F16" else BlockMatrix.of(raw[:4096].contiguous(), fmt, args.cols)
    nbytes = raw.numel() * raw.element_size()
    got = {"bytes_per_value": round(nbytes / (args.rows * args.cols), 4)}
    for m in (1, 8):
        x = torch.randn(m, args.cols)
        got[f"m{m}_gb_s"] = round(nbytes / p50(lambda x=x: kernels.matmul(x, w), args.reps) / 1e9, 2)
    x = torch.randn(256, args.cols)
    sec = p50(lambda: kernels.matmul(x, small), max(2, args.reps // 2))
    got["m256_ms_per_row"] = round(sec * 1000 / 256, 4)
    got["m256_gflop_s"] = round(2 * 256 * 4096 * args.cols / sec / 1e9, 1)
    if int8 and name not in ("F32", "BF16", "F16"):
        x64 = torch.randn(64, args.cols)
        two = p50(lambda: (kernels.matmul(x64[:32], small), kernels.matmul(x64[32:], small)), max(2, args.reps // 2))
        one = p50(lambda: kernels.matmul(x64, small), max(2, args.reps // 2))
        got["int8_m64_ms_per_row"] = round(two * 1000 / 64, 4)
        got["float_m64_ms_per_row"] = round(one * 1000 / 64, 4)
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--cols", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--formats", default=",".join(LAYOUT))
    ap.add_argument("--model", action="append", default=[], help="a GGUF file whose step products to time")
    ap.add_argument("--spin", action="store_true", help="libgomp's default waits instead of PASSIVE")
    args = ap.parse_args(argv)
    if not args.spin:
        from lsp_server.threads import use_fair_threads

        use_fair_threads()
    import torch

    from lsp_server.model.kernels import build, library
    from lsp_server.model.kernels.block_weights import WeightFormat

    kernels = build.load()
    if kernels is None:
        print(json.dumps({"error": "the kernels can't be built here"}))
        return 1
    rng = np.random.default_rng(0)
    report = {"isa": kernels.isa, "threads": torch.get_num_threads(), "shape": [args.rows, args.cols],
              "int8_rows": getattr(library, "INT8_ROWS", None), "memory_gb_s": memory_gb_s(args.reps),
              "formats": {}}
    for name in args.formats.split(","):
        if name not in WeightFormat.__members__:
            report["formats"][name] = "not a format of this version"
            continue
        report["formats"][name] = format_figures(kernels, name, args, rng, bool(report["int8_rows"]))
        print(name, report["formats"][name], file=sys.stderr, flush=True)
    report["models"] = [model_step(kernels, Path(p), args.reps) for p in args.model]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
