"""A model's tensors by role, read in place from a GGUF file or a Hugging Face directory.

The forward pass (`cpu_decoder`) asks for tensors by role, the same names whatever the file
(llama.cpp's short names): `token_embd`, `output`, `output_norm`, `output_norm.bias`,
`rope_freqs`, and per layer `blk.N.attn_norm`, `attn_q`, `attn_k`, `attn_v`, `attn_output` (with
`.bias` where the model has one), `attn_q_norm`, `attn_k_norm`, `attn_post_norm`, `ffn_norm`,
`ffn_gate`, `ffn_up`, `ffn_down`, `ffn_post_norm`.

- A GGUF file (`gguf_weights`): the file memory-mapped once (copy-on-write: pages stay the page
  cache's, shared by every process, until written, and nothing writes them); every matrix a
  `BlockMatrix` over its blocks (every block type the kernels multiply: `BLOCK_FORMATS`) or a
  float16 tensor (F16), views of the mapping: no de-quantized copy anywhere. One-dimensional
  tensors (norms, biases, rotary factors: a few KB each) are copied to float32, which the layer
  code reads. Every tensor's type is checked before anything is mapped, so an unsupported one
  (IQ*, Q2_K, Q3_K, ...) is refused at once, naming the tensor and its type.
- A Hugging Face directory (`safetensors_weights`): the safetensors files' tensors as views
  (transformers' names mapped to the roles).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import torch

from mask_store.gguf_header import GgufHeader, GgufHeaderError, read_header, type_name

from .architectures import DecoderSpec, Unsupported, spec_from_config, spec_from_gguf
from .kernels.block_weights import BLOCK_FORMATS, BlockFormatError, BlockMatrix, WeightFormat

MATRIX_ROLES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
# transformers' names of the roles (Llama / Qwen2 layouts)
HF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
    "self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
    "self_attn.o_proj.weight": "attn_output", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.bias": "attn_output.bias", "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up",
    "mlp.down_proj.weight": "ffn_down",
}
HF_NAMES = {"model.embed_tokens.weight": "token_embd", "lm_head.weight": "output", "model.norm.weight": "output_norm"}
# GGUF's names that differ from the roles (Gemma 3's extra norms)
GGUF_RENAMED = {"post_attention_norm": "attn_post_norm", "post_ffw_norm": "ffn_post_norm"}
_HF_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")
_GGUF_LAYER = re.compile(r"(blk\.\d+\.)(\w+)(\.weight|\.bias)")

Weight = torch.Tensor | BlockMatrix


def role_of_gguf(name: str) -> str:
    """The role of a GGUF tensor name (`blk.3.attn_q.weight` -> `blk.3.attn_q`)."""
    m = _GGUF_LAYER.fullmatch(name)
    if m:
        prefix, base, suffix = m.groups()
        return prefix + GGUF_RENAMED.get(base, base) + (".bias" if suffix == ".bias" else "")
    return name.removesuffix(".weight")


def supported_types() -> dict[int, str]:
    """The ggml types a matrix may have here, by number: the kernels' block formats, F16, F32."""
    from gguf.constants import GGMLQuantizationType

    names = {f.name for f in BLOCK_FORMATS} | {"F16", "F32"}
    return {t.value: t.name for t in GGMLQuantizationType if t.name in names}


def check_types(header: GgufHeader) -> None:
    """`Unsupported` naming the first tensor whose type the kernels don't multiply."""
    ok = supported_types()
    for info in header.tensors.values():
        if info.ggml_type not in ok:
            raise Unsupported(
                f"{header.path}: tensor {info.name} is {type_name(info.ggml_type)}, a block type not computed "
                f"here (supported: {', '.join(sorted(ok.values()))}); pick a file quantized to one of those"
            )


def read_gguf(path: str | Path) -> tuple[GgufHeader, DecoderSpec]:
    """The file's header and spec, every check that needs no tensor data done (a second at
    most): `Unsupported` (or `GgufHeaderError`) naming the file and what is wrong."""
    header = read_header(path)
    spec = spec_from_gguf(header.metadata, header.tensors, str(path))
    check_types(header)
    _check_shapes(spec, {role_of_gguf(i.name): i.shape for i in header.tensors.values()}, str(path))
    return header, spec


def _mapped(path: Path) -> np.ndarray:
    return np.memmap(path, dtype=np.uint8, mode="c")  # copy-on-write: writable views, shared pages


def gguf_weights(path: str | Path, checked: tuple[GgufHeader, DecoderSpec] | None = None
                 ) -> tuple[DecoderSpec, dict[str, Weight]]:
    """The model in the GGUF file `path`: its spec and its tensors by role (see the module doc).
    `checked`: what `read_gguf(path)` gave, where the caller read it already (reading Gemma 3's
    header, its 262,144 token strings, takes ~0.5 s alone)."""
    header, spec = checked if checked is not None else read_gguf(path)
    data = _mapped(header.path)
    out: dict[str, Weight] = {}
    for info in header.tensors.values():
        raw = data[info.offset:info.offset + info.nbytes]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy's memmap is writable ('c'), torch asks anyway
            t = torch.from_numpy(raw)
        role = role_of_gguf(info.name)
        fmt = type_name(info.ggml_type)
        if len(info.dims) == 1:
            if fmt not in ("F32", "F16"):
                raise Unsupported(f"{header.path}: vector {info.name} is {fmt}")
            out[role] = t.view(torch.float32 if fmt == "F32" else torch.float16).to(torch.float32).clone()
            continue
        if len(info.dims) != 2:
            raise Unsupported(f"{header.path}: tensor {info.name} has {len(info.dims)} dimensions")
        rows, cols = info.shape
        if fmt == "F16":
            out[role] = t.view(torch.float16).view(rows, cols)
            continue
        try:
            out[role] = BlockMatrix.of(t.view(rows, -1), WeightFormat[fmt], cols)
        except (BlockFormatError, KeyError) as e:
            raise Unsupported(f"{header.path}: tensor {info.name} ({fmt}): {e}") from e
    return spec, out


def safetensors_weights(wdir: Path) -> tuple[DecoderSpec, dict[str, Weight]]:
    """A Hugging Face directory's model (Llama, Qwen2): its spec from `config.json` and its
    tensors by role, views of the safetensors files."""
    from safetensors import SafetensorError, safe_open

    spec = spec_from_config(wdir)
    out: dict[str, Weight] = {}
    try:
        for path in sorted(Path(wdir).glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    m = _HF_LAYER.fullmatch(name)
                    role = f"blk.{m.group(1)}.{HF_LAYER_NAMES.get(m.group(2), m.group(2))}" if m else HF_NAMES.get(name, name)
                    t = f.get_tensor(name)
                    out[role] = t.to(torch.float32) if t.dim() == 1 else t
    except (SafetensorError, OSError) as e:
        raise Unsupported(f"{wdir}: the weights can't be read: {e}") from e
    _check_shapes(spec, {role: tuple(t.shape) for role, t in out.items()}, str(wdir))
    return spec, out


def expected_shapes(spec: DecoderSpec) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor the spec needs (rows, row length), by role."""
    e, f, d = spec.hidden_size, spec.intermediate_size, spec.head_dim
    q, kv = spec.num_attention_heads * d, spec.num_key_value_heads * d
    shapes: dict[str, tuple[int, ...]] = {"token_embd": (spec.vocab_size, e), "output_norm": (e,)}
    if not spec.tie_word_embeddings:
        shapes["output"] = (spec.vocab_size, e)
    for i in range(spec.num_hidden_layers):
        p = f"blk.{i}."
        shapes |= {p + "attn_norm": (e,), p + "ffn_norm": (e,), p + "attn_q": (q, e), p + "attn_k": (kv, e),
                   p + "attn_v": (kv, e), p + "attn_output": (e, q), p + "ffn_up": (f, e), p + "ffn_down": (e, f)}
        if spec.feed_forward != 2:  # gated
            shapes[p + "ffn_gate"] = (f, e)
        if spec.qk_norm:
            shapes |= {p + "attn_q_norm": (d,), p + "attn_k_norm": (d,)}
        if spec.sandwich_norms:
            shapes |= {p + "attn_post_norm": (e,), p + "ffn_post_norm": (e,)}
    return shapes


def _check_shapes(spec: DecoderSpec, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    """`Unsupported` naming the first tensor the spec needs that is missing or of another shape
    than the metadata says (`shapes`: the tensors' by role; a bias must match its matrix's rows)."""
    for role, shape in expected_shapes(spec).items():
        have = shapes.get(role)
        if have is None and role == "token_embd" and spec.tie_word_embeddings:
            have = shapes.get("output")  # tied weights saved once, as the head
        if have is None:
            raise Unsupported(f"{where}: the weights lack {role}")
        if tuple(have) != shape:
            raise Unsupported(f"{where}: {role} is {list(have)}, not {list(shape)} as the metadata says")
    for role, have in shapes.items():
        matrix = shapes.get(role.removesuffix(".bias"))
        if role.endswith(".bias") and matrix is not None and tuple(have) != (matrix[0],):
            raise Unsupported(f"{where}: {role} is {list(have)}, not [{matrix[0]}]")


__all__ = ["GgufHeaderError", "Unsupported", "Weight", "gguf_weights", "read_gguf", "safetensors_weights"]
