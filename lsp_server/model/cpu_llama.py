"""The CPU forward pass of Llama-family models (Llama/SmolLM2, Qwen2) in plain torch operations
over the memory-mapped weights, without transformers' model classes.

Why hand-written: memory. Loading a model through transformers imports its modeling code and
what that drags in (`torch._dynamo`, `torch.distributed`, sympy, accelerate, the masking and
generation utilities: ~100 MiB resident that the server never uses after the load), builds the
model object and converts the file's tensors. This module reads `config.json` and the safetensors
file(s) itself (`safetensors.safe_open`: the float16 matrices stay views of the file's pages,
shared through the page cache), and computes the same arithmetic, operation for operation, as
transformers' `LlamaForCausalLM`/`Qwen2ForCausalLM` with our float16 weights (`half_weights`) and
kernels did before (`library`), so the logits are bit for bit the same (tests/test_cpu_llama.py
compares them with transformers' on the tiny model) and greedy answers identical. A converted
GGUF's Q4_1/Q8_0 matrices are read in their blocks instead (`gguf_blocks.read_blocks`:
`BlockMatrix`es, a third of the float16 copy's memory, the file's exact values; the embedding
rows de-quantized when looked up); the kernels multiply them as float16 weights of the same
values in prompts, and through their int8 products in decoding steps and verification passes
(`DecodeKernels.matmul`; tests/test_gguf_blocks.py):

- passes of at most `MAX_ATTENTION_ROWS` rows over a non-empty cache, in a model without biases:
  all the layers in one kernel call (`DecodeKernels.llama_layers`: the same bits as
  `llama_layer` per layer, as `fused_layers` calls it; no cancellation check between its layers,
  a pass of a few milliseconds);
- other passes of at most `MAX_ATTENTION_ROWS` rows: norms, products (`half_matmul`), rotary,
  cache write, `row_attention`, MLP as transformers' ops;
- longer passes (prompts): the same with PyTorch's SDPA, called as transformers' `sdpa`
  attention calls it (no mask and `is_causal` on an empty cache, grouped heads through
  `enable_gqa`; a boolean causal mask and the key/value heads repeated after a past).

The KV cache (`CpuCache`) holds float16 keys and values by default (`kv_cache.KV_DTYPE`: half the
attention's memory traffic and the cache's memory; the logits then differ from transformers' by
that rounding, docs/latency.md); `kv_dtype=torch.float32` gives transformers' bits exactly.

Models this does not compute (other architectures, rotary scaling, sliding windows, dimensions
the kernels can't take: `read_shape` says why) and machines without the kernels keep
transformers' model classes (`runtime._load_weights`), as does the GPU path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .gguf_blocks import read_blocks
from .kernels.block_weights import BlockFormatError, BlockMatrix
from .kernels.half_weights import HALF
from .kernels.library import MAX_ATTENTION_ROWS, DecodeKernels, LayerStack, LayerWeights, weight_storage
from .kv_cache import KV_DTYPE, CpuCache, GrowingBuffers

SUPPORTED_TYPES = ("llama", "qwen2")
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


class Unsupported(ValueError):
    """The model is not one this module computes; the message says why."""


@dataclass(frozen=True)
class ModelShape:
    """What the forward pass needs from `config.json`."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool


def _rope(cfg: dict) -> tuple[float, str]:
    """(theta, rope type) from transformers 5's `rope_parameters` or the older keys."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        return float(params.get("rope_theta", 10000.0)), str(params.get("rope_type", "default"))
    scaling = cfg.get("rope_scaling")
    kind = scaling.get("rope_type", scaling.get("type", "scaled")) if isinstance(scaling, dict) else "default"
    return float(cfg.get("rope_theta", 10000.0)), str(kind)


def read_shape(wdir: Path) -> ModelShape:
    """The model's shape from `wdir/config.json`; `Unsupported` when this module would not compute
    exactly what transformers computes for it."""
    try:
        cfg = json.loads((Path(wdir) / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise Unsupported(f"no readable config.json in {wdir}: {e}") from e
    kind = cfg.get("model_type")
    if kind not in SUPPORTED_TYPES:
        raise Unsupported(f"model type {kind!r} (computed here: {', '.join(SUPPORTED_TYPES)})")
    theta, rope_type = _rope(cfg)
    layer_types = cfg.get("layer_types") or []
    why = [
        (cfg.get("hidden_act", "silu") != "silu", f"activation {cfg.get('hidden_act')!r}"),
        (rope_type != "default", f"rotary type {rope_type!r}"),
        (cfg.get("pretraining_tp", 1) != 1, "pretraining_tp"),
        (bool(cfg.get("mlp_bias", False)), "MLP biases"),
        (bool(cfg.get("use_sliding_window", False)) or cfg.get("sliding_window") not in (None, 0)
         and kind != "llama", "a sliding window"),
        (any(t != "full_attention" for t in layer_types), "layers other than full attention"),
        (float(cfg.get("partial_rotary_factor", 1.0)) != 1.0, "partial rotary"),
    ]
    for bad, what in why:
        if bad:
            raise Unsupported(f"{what} (not computed here)")
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        shape = ModelShape(
            kind, int(cfg["vocab_size"]), hidden, int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"]),
            heads, int(cfg.get("num_key_value_heads") or heads), int(cfg.get("head_dim") or hidden // heads),
            float(cfg.get("rms_norm_eps", 1e-6)), theta, bool(cfg.get("tie_word_embeddings", False)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise Unsupported(f"config.json lacks or garbles {e}") from e
    dims = (shape.hidden_size, shape.head_dim, shape.intermediate_size, shape.num_attention_heads * shape.head_dim)
    if any(d % 8 for d in dims) or shape.num_attention_heads % shape.num_key_value_heads:
        raise Unsupported(f"dimensions {dims} (the kernels take multiples of 8, whole groups of heads)")
    return shape


def matrix_cols(shape: ModelShape) -> dict[str, int]:
    """The row length of each matrix of the model, by name."""
    e, f, qd = shape.hidden_size, shape.intermediate_size, shape.num_attention_heads * shape.head_dim
    cols = {"model.embed_tokens.weight": e, "lm_head.weight": e}
    for i in range(shape.num_hidden_layers):
        for name in PROJECTIONS:
            cols[f"model.layers.{i}.{name}.weight"] = {"self_attn.o_proj": qd, "mlp.down_proj": f}.get(name, e)
    return cols


def read_tensors(wdir: Path, shape: ModelShape) -> dict[str, torch.Tensor | BlockMatrix]:
    """Every tensor of the safetensors files in `wdir`, as views of the memory-mapped files;
    the matrices a converted GGUF also keeps in its blocks (`gguf_blocks.read_blocks`) as those
    `BlockMatrix`es (their float16 copies not read)."""
    from safetensors import safe_open

    try:
        out: dict[str, torch.Tensor | BlockMatrix] = dict(read_blocks(wdir, matrix_cols(shape)))
    except BlockFormatError as e:
        raise Unsupported(f"the quantized weights can't be read: {e}") from e
    for path in sorted(Path(wdir).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                if name not in out:
                    out[name] = f.get_tensor(name)
    return out


def _matrix(t: torch.Tensor | BlockMatrix) -> torch.Tensor | BlockMatrix:
    """A matrix as the kernels multiply by it: a `BlockMatrix` as it is, a float16 tensor the
    file's own where it is float16 (mapped, not copied)."""
    return t if isinstance(t, BlockMatrix) or t.dtype == HALF else t.to(HALF)


def embed_rows(table: torch.Tensor | BlockMatrix, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of an embedding table (float16 or blocks) as float32."""
    if isinstance(table, BlockMatrix):
        return table.embedding(ids)
    return F.embedding(ids, table).to(torch.float32)


def rms_norm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm, operation for operation (float32)."""
    variance = h.pow(2).mean(-1, keepdim=True)
    return weight * (h * torch.rsqrt(variance + eps))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[1, Hkv, L, D] → [1, Hkv * groups, L, D], each key/value head repeated for its group."""
    if groups == 1:
        return x
    b, h_kv, length, d = x.shape
    return x[:, :, None, :, :].expand(b, h_kv, groups, length, d).reshape(b, h_kv * groups, length, d)


@dataclass(frozen=True)
class Pass:
    """What every layer of one forward pass shares: its rows, the cache's length before it,
    the rotary tables and the attention mask (long passes after a past only)."""

    rows: int
    past: int
    cos: torch.Tensor  # [1, rows, head_dim] float32
    sin: torch.Tensor
    mask: torch.Tensor | None


class CpuDecoderLayer(torch.nn.Module):
    """One decoder layer; its matrices (float16, or `BlockMatrix`es: `matrices`, their tensors
    the buffers `w0`..`w6`) and float32 vectors are buffers (not copied). A module so that
    `kv_cache.StopBetweenLayers` can stop a pass before it."""

    def __init__(self, shape: ModelShape, kernels: DecodeKernels, tensors: dict[str, torch.Tensor],
                 prefix: str) -> None:
        super().__init__()
        self.shape = shape
        self.kernels = kernels
        self.groups = shape.num_attention_heads // shape.num_key_value_heads
        self.scale = shape.head_dim ** -0.5
        self.matrices = tuple(_matrix(tensors[f"{prefix}{name}.weight"]) for name in PROJECTIONS)
        for i, name in enumerate(PROJECTIONS):
            self.register_buffer(f"w{i}", weight_storage(self.matrices[i]), persistent=False)
            bias = tensors.get(f"{prefix}{name}.bias")
            self.register_buffer(f"b{i}", None if bias is None else bias.to(torch.float32), persistent=False)
        self.register_buffer("in_norm", tensors[f"{prefix}input_layernorm.weight"].to(torch.float32),
                             persistent=False)
        self.register_buffer("post_norm", tensors[f"{prefix}post_attention_layernorm.weight"].to(torch.float32),
                             persistent=False)
        self.fused: LayerWeights | None = None
        if all(getattr(self, f"b{i}") is None for i in range(len(PROJECTIONS))):
            self.fused = kernels.layer_weights(
                self.in_norm, self.post_norm, shape.rms_norm_eps, self.matrices,
                shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim, shape.intermediate_size,
                self.scale,
            )

    def _linear(self, x: torch.Tensor, i: int) -> torch.Tensor:
        out = self.kernels.matmul(x, self.matrices[i])
        bias = getattr(self, f"b{i}")
        return out if bias is None else out + bias

    def forward(self, h: torch.Tensor, p: Pass, kv: GrowingBuffers) -> torch.Tensor:
        if p.rows <= MAX_ATTENTION_ROWS and p.past > 0 and self.fused is not None:
            self.kernels.append_layer(h, self.fused, p.cos, p.sin, kv)  # h updated in place
            return h
        d, eps = self.shape.head_dim, self.shape.rms_norm_eps
        x = rms_norm(h, self.in_norm, eps)
        q = self._linear(x, 0).view(1, p.rows, -1, d).transpose(1, 2)
        k = self._linear(x, 1).view(1, p.rows, -1, d).transpose(1, 2)
        v = self._linear(x, 2).view(1, p.rows, -1, d).transpose(1, 2)
        cos, sin = p.cos.unsqueeze(1), p.sin.unsqueeze(1)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        keys, values = kv.write(k, v)
        if p.rows <= MAX_ATTENTION_ROWS:
            attn = self.kernels.row_attention(q, keys, values, self.scale)
        else:
            keys, values = keys.float(), values.float()  # as the cache holds them (rounded if float16)
            if p.mask is None:  # an empty cache: causal, no mask
                extra = {"enable_gqa": True} if self.groups > 1 else {}
                out = F.scaled_dot_product_attention(q, keys, values, attn_mask=None, dropout_p=0.0,
                                                     scale=self.scale, is_causal=True, **extra)
            else:
                out = F.scaled_dot_product_attention(q, repeat_kv(keys, self.groups), repeat_kv(values, self.groups),
                                                     attn_mask=p.mask, dropout_p=0.0, scale=self.scale,
                                                     is_causal=False)
            attn = out.transpose(1, 2).contiguous()
        h = h + self._linear(attn.reshape(1, p.rows, -1).contiguous(), 3)
        x = rms_norm(h, self.post_norm, eps)
        return h + self._linear(F.silu(self._linear(x, 4)) * self._linear(x, 5), 6)


@dataclass(frozen=True)
class CpuOutput:
    """A forward pass's result, as transformers' output names it (`logits`, `cache`)."""

    logits: torch.Tensor  # [1, keep, vocab] float32
    cache: CpuCache


class CpuLlama(torch.nn.Module):
    """A Llama-family causal LM on the CPU (see the module doc): `forward(input_ids, cache,
    logits_to_keep=k)` as transformers' model is called by the runtime."""

    def __init__(self, shape: ModelShape, kernels: DecodeKernels, tensors: dict[str, torch.Tensor],
                 kv_dtype: torch.dtype = KV_DTYPE, one_call: bool = True) -> None:
        super().__init__()
        self.config = shape
        self.kernels = kernels
        self.kv_dtype = kv_dtype
        head = tensors.get("lm_head.weight")
        embed = tensors.get("model.embed_tokens.weight")
        if embed is None and shape.tie_word_embeddings:  # tied weights saved once, as the head
            embed = head
        if embed is None:
            raise KeyError("model.embed_tokens.weight")
        tied = shape.tie_word_embeddings or head is None
        self.embed_table = _matrix(embed)  # float16 or a BlockMatrix; its tensor the buffer `embed`
        self.head_matrix = self.embed_table if tied else _matrix(head)  # the buffer `lm_head`
        self.register_buffer("embed", weight_storage(self.embed_table), persistent=False)
        self.register_buffer("lm_head", self.embed if tied else weight_storage(self.head_matrix), persistent=False)
        self.register_buffer("norm", tensors["model.norm.weight"].to(torch.float32), persistent=False)
        d = shape.head_dim
        inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float) / d))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.layers = torch.nn.ModuleList(
            CpuDecoderLayer(shape, kernels, tensors, f"model.layers.{i}.") for i in range(shape.num_hidden_layers)
        )
        fused = [layer.fused for layer in self.layers]
        # every layer fused: short passes run all of them in one kernel call (`one_call=False`:
        # one call per layer, as before; bench/decode_step.py compares them)
        self.stack: LayerStack | None = kernels.layer_stack(fused) if one_call and all(fused) else None

    def new_cache(self) -> CpuCache:
        return CpuCache(len(self.layers), self.kv_dtype, self.config.num_key_value_heads, self.config.head_dim)

    def _pass(self, rows: int, past: int) -> Pass:
        position_ids = (torch.arange(rows) + past).unsqueeze(0)
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        mask = None
        if rows > MAX_ATTENTION_ROWS and past > 0:
            mask = (torch.arange(past + rows)[None, :] <= (torch.arange(rows) + past)[:, None]).view(1, 1, rows, -1)
        return Pass(rows, past, emb.cos(), emb.sin(), mask)

    def forward(self, input_ids: torch.Tensor, cache: CpuCache | None = None, use_cache: bool = True,
                logits_to_keep: int = 1) -> CpuOutput:
        """Logits of the last `logits_to_keep` positions (all with 0) of `input_ids` [1, n], fed
        after `cache` (a new one when None), which the pass extends."""
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"input_ids must have shape [1, n], not {list(input_ids.shape)}")
        if cache is None:
            cache = self.new_cache()
        p = self._pass(input_ids.shape[1], cache.get_seq_length())
        h = embed_rows(self.embed_table, input_ids)
        if (self.stack is not None and p.rows <= MAX_ATTENTION_ROWS and p.past > 0
                and cache.lengths_agree(p.past)):
            self.kernels.llama_layers(h, self.stack, p.cos, p.sin, cache)  # h updated in place
        else:
            for layer, kv in zip(self.layers, cache.layers):
                h = layer(h, p, kv)
        h = rms_norm(h, self.norm, self.config.rms_norm_eps)
        if logits_to_keep:
            h = h[:, -logits_to_keep:, :]
        return CpuOutput(self.kernels.matmul(h, self.head_matrix), cache)


def load_cpu_llama(wdir: Path, kernels: DecodeKernels, kv_dtype: torch.dtype = KV_DTYPE,
                   one_call: bool = True) -> CpuLlama:
    """The model in `wdir` computed here (`Unsupported` where it can't be, see `read_shape`),
    its KV cache of `kv_dtype` (float16 or float32), its short passes in one kernel call unless
    `one_call` is False."""
    shape = read_shape(wdir)
    tensors = read_tensors(wdir, shape)
    try:
        return CpuLlama(shape, kernels, tensors, kv_dtype, one_call)
    except KeyError as e:
        raise Unsupported(f"the weights lack {e}") from e
