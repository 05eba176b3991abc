"""Random-weight GGUF files of each architecture, for the tests and benchmarks (no downloads).

A stand-in has a real tokenizer (its `tokenizer.ggml.*` metadata copied from a GGUF file that
has one: the default model's byte-level BPE, or any other), an architecture's metadata and
tensors as llama.cpp names them, and random weights in the block types asked for, mixed per
tensor as real files mix them. Legacy block types (Q4_0 ... Q8_0), F16 and BF16 are quantized
from random values with `gguf.quants.quantize`; K-quants (which gguf can only de-quantize) are
random bytes with sane float16 scales. Answers are noise; what is checked with a stand-in (the
file loads, every offered item compiles, the logits are a reference forward's, the speed at a
real shape) does not depend on them.

Shapes (`SHAPES`): `tiny-<arch>` (2 layers, width 256: K-quant rows are 256 values) for tests;
`qwen2.5-coder-0.5b` (Qwen2.5-Coder-0.5B's published shape), `gemma3-1b-4` and
`starcoder2-3b-4` (Gemma 3 1B's and StarCoder2-3B's layer shapes, 4 layers) for benchmarks.
`Q4_K_M` (`q4_k_m_types`) gives each tensor the type llama.cpp's Q4_K_M recipe would (Q6_K for
half the v and down projections and the head, Q4_K else; Q5_0/Q8_0 where a row is not whole
256-value blocks).

    python -m lsp_server.model.stand_in_gguf SHAPE OUT.gguf [--types q4_k_m|all] [--vocab FILE.gguf]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mask_store.gguf_header import read_header

LEGACY = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16", "F32")
K_QUANTS = ("Q4_K", "Q5_K", "Q6_K")
ALL_TYPES = LEGACY[:5] + K_QUANTS + LEGACY[5:]  # every type the kernels take


@dataclass(frozen=True)
class GgufShape:
    architecture: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    window: int = 0  # gemma3's sliding window
    tied: bool = True


SHAPES = {
    "tiny-llama": GgufShape("llama", 2, 256, 512, 4, 2, 64),
    "tiny-qwen2": GgufShape("qwen2", 2, 256, 512, 4, 2, 64, tied=False),
    "tiny-gemma3": GgufShape("gemma3", 6, 256, 512, 6, 1, 64, window=16),  # a step's 6 heads in parts of 3
    "tiny-starcoder2": GgufShape("starcoder2", 2, 256, 512, 4, 2, 64, tied=False),
    "qwen2.5-coder-0.5b": GgufShape("qwen2", 24, 896, 4864, 14, 2, 64),
    "gemma3-1b-4": GgufShape("gemma3", 4, 1152, 6912, 4, 1, 256, window=512),
    "starcoder2-3b-4": GgufShape("starcoder2", 4, 3072, 12288, 24, 2, 128),
}


def default_vocab() -> Path:
    from mask_store.model_files import resolve_model

    return resolve_model("default").path


def tokenizer_fields(vocab_gguf: Path) -> dict:
    """The `tokenizer.ggml.*` metadata of a GGUF file (read with our fast header reader)."""
    meta = read_header(vocab_gguf).metadata
    return {k: v for k, v in meta.items() if k.startswith("tokenizer.")}


def bpe_fields(tokenizer_json: Path, pre: str, eos: int) -> dict:
    """GGUF tokenizer metadata (`gpt2` model: byte-level BPE) for a `tokenizer.json` of one
    (its vocabulary padded to a multiple of 128 as embeddings are; added tokens marked control
    where special, as llama.cpp's converter does)."""
    import json

    spec = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    vocab = dict(spec["model"]["vocab"])
    added = {t["id"]: t for t in spec.get("added_tokens", [])}
    size = -(-(max(list(vocab.values()) + list(added)) + 1) // 128) * 128
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = np.full(size, 5, dtype=np.int32)  # unused, until named below
    for text, i in vocab.items():
        tokens[i], types[i] = text, 1
    for i, t in added.items():
        tokens[i], types[i] = t["content"], 3 if t.get("special") else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.eos_token_id": eos, "tokenizer.ggml.add_bos_token": False}


def matrix_roles(shape: GgufShape) -> dict[str, tuple[int, int]]:
    """Every matrix of the shape, by GGUF name: (rows, row length)."""
    e, f, q, kv = shape.hidden, shape.ffn, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    out = {}
    for i in range(shape.layers):
        p = f"blk.{i}."
        out |= {p + "attn_q.weight": (q, e), p + "attn_k.weight": (kv, e), p + "attn_v.weight": (kv, e),
                p + "attn_output.weight": (e, q), p + "ffn_up.weight": (f, e), p + "ffn_down.weight": (e, f)}
        if shape.architecture != "starcoder2":
            out[p + "ffn_gate.weight"] = (f, e)
    return out


def q4_k_m_types(name: str, cols: int, layer_count: int) -> str:
    """llama.cpp's Q4_K_M recipe, roughly: Q6_K for the head and for the v and down
    projections of half the layers, Q4_K else; rows that are not whole 256-value blocks take
    Q5_0 (Q8_0 for the heavier ones), as llama.cpp falls back."""
    heavy = name in ("output.weight", "token_embd.weight") or (
        any(k in name for k in ("attn_v", "ffn_down")) and int(name.split(".")[1]) % 2 == 0)
    if cols % 256:
        return "Q8_0" if heavy else "Q5_0"
    return "Q6_K" if heavy else "Q4_K"


def cycling_types(types: tuple[str, ...]):
    """A type for each matrix in turn from `types` (each used where its blocks fit the row)."""
    counter = iter(range(1 << 30))

    def pick(name: str, cols: int, layer_count: int) -> str:
        while True:
            t = types[next(counter) % len(types)]
            if t not in K_QUANTS or cols % 256 == 0:
                return t
    return pick


def random_blocks(rows: int, cols: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """A matrix [rows, cols] of random values in block type `kind` (uint8 rows of blocks, or
    float arrays for F16/F32), of about the spread of a trained model's weights (~0.02-0.05)."""
    from gguf import GGMLQuantizationType, quants

    t = GGMLQuantizationType[kind]
    if kind in LEGACY:
        values = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.04).astype(np.float32)
        if kind == "F32":
            return values
        return quants.quantize(values, t)
    nblocks = rows * cols // 256
    if kind == "Q6_K":
        raw = rng.integers(0, 256, size=(nblocks, 210), dtype=np.uint8)
        raw[:, 192:208] = rng.integers(-20, 21, size=(nblocks, 16), dtype=np.int8).view(np.uint8)  # scales
        raw[:, 208:210] = _half(rng.uniform(5e-5, 1.5e-4, nblocks))  # d: |d * scale * (q - 32)| <= ~0.1
    else:
        size = 144 if kind == "Q4_K" else 176
        raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
        top = 15 if kind == "Q4_K" else 31
        raw[:, 0:2] = _half(rng.uniform(2.0, 4.0, nblocks) / (63 * top))  # d: d * scale * q up to ~0.12
        raw[:, 2:4] = _half(rng.uniform(1.0, 2.0, nblocks) / (63 * top))  # dmin
    return raw.reshape(rows, -1)


def _half(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).view(np.uint8).reshape(-1, 2)


def write_stand_in(path: Path, shape: GgufShape, pick_type=None, vocab_gguf: Path | None = None,
                   seed: int = 0, vocab_fields: dict | None = None) -> Path:
    """A random-weight GGUF model file of `shape` at `path`: its tokenizer's metadata from
    `vocab_fields` (or the GGUF file `vocab_gguf`, the default model's by default), each
    matrix's block type from `pick_type(name, row length, layers)` (Q4_K_M's recipe by
    default). Written aside and renamed."""
    from gguf import GGMLQuantizationType, GGUFWriter

    rng = np.random.default_rng(seed)
    fields = vocab_fields if vocab_fields is not None else tokenizer_fields(vocab_gguf or default_vocab())
    vocab = len(fields["tokenizer.ggml.tokens"])
    pick = pick_type or q4_k_m_types
    arch, e = shape.architecture, shape.hidden
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # this process's own
    w = GGUFWriter(str(tmp), arch)
    w.add_block_count(shape.layers)
    w.add_context_length(8192)
    w.add_embedding_length(e)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_rope_freq_base(1e6 if arch != "llama" else 1e5)
    if arch == "starcoder2":
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_layer_norm_rms_eps(1e-6)
    if shape.window:
        w.add_sliding_window(shape.window)
    for key, value in fields.items():
        _add_field(w, key, value)
    vectors = {"output_norm.weight": e}
    for i in range(shape.layers):
        p = f"blk.{i}."
        vectors |= {p + "attn_norm.weight": e, p + "ffn_norm.weight": e}
        if arch == "gemma3":
            vectors |= {p + "attn_q_norm.weight": shape.head_dim, p + "attn_k_norm.weight": shape.head_dim,
                        p + "post_attention_norm.weight": e, p + "post_ffw_norm.weight": e}
        if arch in ("qwen2", "starcoder2"):
            vectors |= {p + "attn_q.bias": shape.heads * shape.head_dim,
                        p + "attn_k.bias": shape.kv_heads * shape.head_dim,
                        p + "attn_v.bias": shape.kv_heads * shape.head_dim}
        if arch == "starcoder2":
            vectors |= {p + "attn_norm.bias": e, p + "ffn_norm.bias": e, p + "attn_output.bias": e,
                        p + "ffn_up.bias": shape.ffn, p + "ffn_down.bias": e}
    if arch == "starcoder2":
        vectors["output_norm.bias"] = e
    for name, n in vectors.items():
        if name.endswith(".bias"):
            v = rng.standard_normal(n, dtype=np.float32) * 0.02
        else:
            v = 1.0 + rng.standard_normal(n, dtype=np.float32) * 0.05
        w.add_tensor(name, v.astype(np.float32))
    matrices = {"token_embd.weight": (vocab, e)} | matrix_roles(shape)
    if not shape.tied:
        matrices["output.weight"] = (vocab, e)
    for name, (rows, cols) in matrices.items():
        kind = pick(name, cols, shape.layers)
        data = random_blocks(rows, cols, kind, rng)
        w.add_tensor(name, data, raw_dtype=None if kind in ("F32", "F16") else GGMLQuantizationType[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return path


def _add_field(w, key: str, value) -> None:
    from gguf import GGUFValueType

    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, np.ndarray):
        kind = {np.dtype("float32"): GGUFValueType.FLOAT32, np.dtype("int32"): GGUFValueType.INT32,
                np.dtype("uint32"): GGUFValueType.UINT32, np.dtype("bool"): GGUFValueType.BOOL}[value.dtype]
        w.add_key_value(key, value.tolist(), GGUFValueType.ARRAY, sub_type=kind)
    else:
        w.add_array(key, list(value))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--types", default="q4_k_m", help="q4_k_m, all (every type in turn), or one type name")
    ap.add_argument("--vocab", type=Path, default=None, help="a GGUF file whose tokenizer to copy")
    args = ap.parse_args(argv)
    pick = (q4_k_m_types if args.types == "q4_k_m" else cycling_types(ALL_TYPES) if args.types == "all"
            else cycling_types((args.types,)))
    write_stand_in(args.out, SHAPES[args.shape], pick, args.vocab)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

