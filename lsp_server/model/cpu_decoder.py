"""The CPU forward pass of decoder-only models (llama, qwen2, gemma3, starcoder2) in plain torch
operations and our kernels, over weights read in place (`model_weights`), without transformers.

Why hand-written: memory and speed. transformers' model classes import their modeling code and
what it drags in (~100 MiB resident the server never uses after the load), take weights as
float tensors (a GGUF file's blocks de-quantized: twice the file's memory or more) and compute
with PyTorch's products (one row at a time for float16 weights). Here the weights stay the
file's own bytes (`BlockMatrix`: every block type the kernels multiply; float16 matrices), the
products are our kernels' (`kernels.library`: the same bits for a row whatever the rows of the
pass, which keeps speculative decoding's output identical), and what differs between families is
data (`architectures.DecoderSpec`), not code paths per model.

A layer, for every family (`DecoderSpec` says which parts it has):

    x = norm(h)                          RMS, or LayerNorm with bias (starcoder2)
    q, k, v = x Wq (+bq), x Wk (+bk), x Wv (+bv)
    q, k = rms(q), rms(k) per head       gemma3
    q, k = rotary(q), rotary(k)          pairs (2i, 2i+1) for llama GGUF files, halves else;
                                         the layer's base (gemma3's windowed layers: 10,000)
    a = softmax(scale q.k over the layer's window) v, o = a Wo (+bo)
    h = h + (rms(o) for gemma3, else o)
    x = norm(h); f = down(act(gate x) * up x) or down(gelu(up x + bu)) + bd
    h = h + (rms(f) for gemma3, else f)

then the output norm, the head (the embedding table where tied) and gemma's soft-cap if any.

- passes of at most `MAX_ATTENTION_ROWS` rows over a non-empty cache (decoding steps,
  verification passes): all the layers in one kernel call (`DecodeKernels.decoder_layers`: the
  same layer written in C for every family, each row computed alone, so a verification pass
  gives single steps' bits; a llama GGUF file's q/k rows rotated in pairs as stored);
- other passes of at most `MAX_ATTENTION_ROWS` rows (a short first chunk): the layer as torch
  operations with our products and `row_attention` (a windowed layer past its window:
  PyTorch's attention with a mask);
- longer passes (prompts): the same with PyTorch's SDPA (no mask and `is_causal` on an empty
  cache where the layer has no window, else a boolean mask).

For Hugging Face directories of Llama and Qwen2 (`safetensors_weights`) the arithmetic is
transformers' `LlamaForCausalLM`/`Qwen2ForCausalLM`'s, operation for operation, so with our
float16 weights and a float32 cache the logits are its bits exactly (tests/test_cpu_decoder.py).
The KV cache (`CpuCache`) holds float16 keys and values by default (`kv_cache.KV_DTYPE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .architectures import DecoderSpec, FeedForward, Norm, Rotary, Unsupported
from .kernels.block_weights import BlockMatrix
from .kernels.half_weights import HALF
from .kernels.library import MAX_ATTENTION_ROWS, DecodeKernels, LayerStack, weight_storage
from .kv_cache import KV_DTYPE, CpuCache, ForwardCancelled
from .model_weights import MATRIX_ROLES, Weight, gguf_weights, safetensors_weights
from .rotary import RotaryTables

__all__ = ["CpuDecoder", "Unsupported", "load_cpu_decoder"]


def _matrix(t: Weight) -> Weight:
    """A matrix as the kernels multiply by it: a `BlockMatrix` as it is, a float16 tensor the
    file's own where it is float16 (mapped, not copied)."""
    return t if isinstance(t, BlockMatrix) or t.dtype == HALF else t.to(HALF)


def project(kernels: DecodeKernels, x: torch.Tensor, w: Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T (+ bias) with the kernels' products."""
    out = kernels.matmul(x, w)
    return out if bias is None else out + bias


def embed_rows(table: Weight, ids: torch.Tensor, kernels: DecodeKernels) -> torch.Tensor:
    """Rows `ids` of an embedding table (float16 or blocks, de-quantized by the kernels) as float32."""
    if isinstance(table, BlockMatrix):
        return table.embedding(ids, kernels)
    return F.embedding(ids, table).to(torch.float32)


def rms_norm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm, operation for operation (float32)."""
    variance = h.pow(2).mean(-1, keepdim=True)
    return weight * (h * torch.rsqrt(variance + eps))


def norm(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, kind: Norm) -> torch.Tensor:
    if kind is Norm.RMS:
        return rms_norm(h, weight, eps)
    return F.layer_norm(h, (h.shape[-1],), weight, bias, eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: Rotary) -> torch.Tensor:
    """The rotary embedding of x [1, heads, rows, D] with cos/sin [1, 1, rows, D] (each angle
    given for both dims it rotates: halves (i, i + D/2), or adjacent pairs (2i, 2i + 1))."""
    if kind is Rotary.HALVES:
        return (x * cos) + (rotate_half(x) * sin)
    pairs = x.unflatten(-1, (-1, 2))
    swapped = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return (x * cos) + (swapped * sin)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[1, Hkv, L, D] → [1, Hkv * groups, L, D], each key/value head repeated for its group."""
    if groups == 1:
        return x
    b, h_kv, length, d = x.shape
    return x[:, :, None, :, :].expand(b, h_kv, groups, length, d).reshape(b, h_kv * groups, length, d)


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


@dataclass(frozen=True)
class Pass:
    """What every layer of one forward pass shares: its rows, the cache's length before it,
    the rotary tables (one per base: `DecoderSpec.rotary_table`) and the attention masks by
    window (None: causal without a mask, on an empty cache)."""

    rows: int
    past: int
    cos: torch.Tensor  # [tables, rows, head_dim]: each angle for both dims it rotates
    sin: torch.Tensor
    masks: dict[int, torch.Tensor | None]  # window (0: none): [1, 1, rows, past + rows] boolean


class CpuDecoderLayer(torch.nn.Module):
    """One decoder layer: its matrices (float16, or `BlockMatrix`es: `matrices`, their tensors
    the buffers `w0`..`w6`), biases and norms (float32 buffers), and `fused`, the same as the
    kernels' `LayerWeights`."""

    def __init__(self, spec: DecoderSpec, kernels: DecodeKernels, tensors: dict[str, Weight], index: int) -> None:
        super().__init__()
        self.spec = spec
        self.kernels = kernels
        self.index = index
        self.window = spec.windows[index]
        self.table = spec.rotary_table(index)  # which of the pass's rotary tables it reads
        self.groups = spec.num_attention_heads // spec.num_key_value_heads
        p = f"blk.{index}."
        self.matrices = tuple(None if tensors.get(p + role) is None else _matrix(tensors[p + role])
                              for role in MATRIX_ROLES)
        for i, role in enumerate(MATRIX_ROLES):
            m = self.matrices[i]
            self.register_buffer(f"w{i}", None if m is None else weight_storage(m), persistent=False)
            self.register_buffer(f"b{i}", tensors.get(p + role + ".bias"), persistent=False)
        for name in ("attn_norm", "attn_norm.bias", "ffn_norm", "ffn_norm.bias", "attn_q_norm", "attn_k_norm",
                     "attn_post_norm", "ffn_post_norm"):
            self.register_buffer(name.replace(".", "_"), tensors.get(p + name), persistent=False)
        self.fused = kernels.layer_weights(
            self.attn_norm, self.ffn_norm, spec.norm_eps, self.matrices, spec.num_attention_heads,
            spec.num_key_value_heads, spec.head_dim, spec.intermediate_size, spec.attention_scale,
            norm_biases=(self.attn_norm_bias, self.ffn_norm_bias),
            biases=tuple(getattr(self, f"b{i}") for i in (0, 1, 2, 3, 5, 6)),  # q, k, v, o, up, down
            qk_norms=(self.attn_q_norm, self.attn_k_norm), output_norms=(self.attn_post_norm, self.ffn_post_norm),
            kinds=(int(spec.norm), int(spec.feed_forward), int(spec.rotary)), window=self.window,
            table=self.table,
        )

    def _linear(self, x: torch.Tensor, i: int) -> torch.Tensor:
        return project(self.kernels, x, self.matrices[i], getattr(self, f"b{i}"))

    def _attention(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, p: Pass) -> torch.Tensor:
        """softmax(scale q.k) v over the layer's window: [1, rows, heads * D]."""
        scale = self.spec.attention_scale
        if p.rows <= MAX_ATTENTION_ROWS and (self.window == 0 or p.past + p.rows <= self.window):
            return self.kernels.row_attention(q, keys, values, scale).reshape(1, p.rows, -1)
        keys, values = keys.float(), values.float()  # as the cache holds them (rounded if float16)
        mask = p.masks[self.window]
        if mask is None:  # an empty cache, no window: causal, no mask
            extra = {"enable_gqa": True} if self.groups > 1 else {}
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=None, dropout_p=0.0, scale=scale,
                                                 is_causal=True, **extra)
        else:
            out = F.scaled_dot_product_attention(q, repeat_kv(keys, self.groups), repeat_kv(values, self.groups),
                                                 attn_mask=mask, dropout_p=0.0, scale=scale, is_causal=False)
        return out.transpose(1, 2).reshape(1, p.rows, -1)

    def forward(self, h: torch.Tensor, p: Pass, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """The layer for the pass's rows `h` [1, rows, E]; `keys`/`values` [1, kv_heads, capacity,
        head_dim], the layer's cache buffers, which get positions p.past .. p.past+rows-1."""
        if p.rows <= MAX_ATTENTION_ROWS and p.past > 0:
            self.kernels.decoder_layer(h, self.fused, p.cos, p.sin, keys, values, p.past)  # h updated in place
            return h
        s = self.spec
        d, eps = s.head_dim, s.norm_eps
        x = norm(h, self.attn_norm, self.attn_norm_bias, eps, s.norm)
        q = self._linear(x, 0).view(1, p.rows, -1, d).transpose(1, 2)
        k = self._linear(x, 1).view(1, p.rows, -1, d).transpose(1, 2)
        v = self._linear(x, 2).view(1, p.rows, -1, d).transpose(1, 2)
        if s.qk_norm:
            q, k = rms_norm(q, self.attn_q_norm, eps), rms_norm(k, self.attn_k_norm, eps)
        cos, sin = p.cos[self.table][None, None], p.sin[self.table][None, None]
        q, k = rotate(q, cos, sin, s.rotary), rotate(k, cos, sin, s.rotary)
        end = p.past + p.rows
        keys[:, :, p.past : end] = k  # rounded to the cache's element type
        values[:, :, p.past : end] = v
        o = self._linear(self._attention(q, keys[:, :, :end], values[:, :, :end], p), 3)
        h = h + (rms_norm(o, self.attn_post_norm, eps) if s.sandwich_norms else o)
        x = norm(h, self.ffn_norm, self.ffn_norm_bias, eps, s.norm)
        if s.feed_forward is FeedForward.GELU:
            f = self._linear(_gelu(self._linear(x, 5)), 6)
        else:
            act = F.silu if s.feed_forward is FeedForward.SILU_GATED else _gelu
            f = self._linear(act(self._linear(x, 4)) * self._linear(x, 5), 6)
        return h + (rms_norm(f, self.ffn_post_norm, eps) if s.sandwich_norms else f)


@dataclass(frozen=True)
class CpuOutput:
    """A forward pass's result, as transformers' output names it (`logits`, `cache`)."""

    logits: torch.Tensor  # [1, keep, vocab] float32
    cache: CpuCache


class CpuDecoder(torch.nn.Module):
    """A decoder-only causal LM on the CPU (see the module doc): `forward(input_ids, cache,
    logits_to_keep=k)` as transformers' model is called by the runtime; `config` its spec."""

    def __init__(self, spec: DecoderSpec, kernels: DecodeKernels, tensors: dict[str, Weight],
                 kv_dtype: torch.dtype = KV_DTYPE, one_call: bool = True) -> None:
        super().__init__()
        self.config = spec
        self.kernels = kernels
        self.kv_dtype = kv_dtype
        head, embed = tensors.get("output"), tensors.get("token_embd")
        if embed is None and spec.tie_word_embeddings:  # tied weights saved once, as the head
            embed = head
        tied = spec.tie_word_embeddings or head is None
        self.embed_table = _matrix(embed)  # float16 or a BlockMatrix; its tensor the buffer `embed`
        self.head_matrix = self.embed_table if tied else _matrix(head)  # the buffer `lm_head`
        self.register_buffer("embed", weight_storage(self.embed_table), persistent=False)
        self.register_buffer("lm_head", self.embed if tied else weight_storage(self.head_matrix), persistent=False)
        self.register_buffer("norm", tensors["output_norm"], persistent=False)
        self.register_buffer("norm_bias", tensors.get("output_norm.bias"), persistent=False)
        d = spec.head_dim
        exponents = torch.arange(0, d, 2, dtype=torch.float) / d
        factors = tensors.get("rope_freqs")  # Llama 3's per-dimension divisors
        inv_freq = torch.stack([1.0 / (theta ** exponents) / (1.0 if factors is None else factors)
                                for theta in spec.rotary_bases])  # [tables, D/2]
        self.rotary_tables = RotaryTables(inv_freq, spec.rope_scale, spec.rotary)
        self.layers = torch.nn.ModuleList(
            CpuDecoderLayer(spec, kernels, tensors, i) for i in range(spec.num_hidden_layers)
        )
        # short passes run all the layers in one kernel call (`one_call=False`: one call per
        # layer; bench/decode_step.py compares them)
        self.stack: LayerStack | None = kernels.layer_stack([layer.fused for layer in self.layers]) if one_call else None

    def new_cache(self) -> CpuCache:
        return CpuCache(len(self.layers), self.kv_dtype, self.config.num_key_value_heads, self.config.head_dim)

    def _pass(self, rows: int, past: int) -> Pass:
        cos, sin = self.rotary_tables.of(rows, past)
        if rows <= MAX_ATTENTION_ROWS and past > 0:  # the layers in C (`decoder_layer[s]`): no masks
            return Pass(rows, past, cos, sin, {})
        masks: dict[int, torch.Tensor | None] = {}
        query = (torch.arange(rows) + past)[:, None]
        key = torch.arange(past + rows)[None, :]
        for window in set(self.config.windows):
            if rows <= MAX_ATTENTION_ROWS and (window == 0 or past + rows <= window):
                continue  # row attention: no mask
            if window == 0 and past == 0:
                masks[window] = None
                continue
            allowed = key <= query
            if window:
                allowed &= query - key < window
            masks[window] = allowed.view(1, 1, rows, -1)
        return Pass(rows, past, cos, sin, masks)

    def forward(self, input_ids: torch.Tensor, cache: CpuCache | None = None, use_cache: bool = True,
                logits_to_keep: int = 1, cancel=None, head_rows: torch.Tensor | None = None) -> CpuOutput:
        """Logits of the last `logits_to_keep` positions (all with 0) of `input_ids` [1, n], fed
        after `cache` (a new one when None), which the pass extends. `cancel()` is asked before
        each layer computed on its own (not inside the one call of a short pass): when it says
        so, `ForwardCancelled` is raised and the cache is as it was. `head_rows` (bool [vocabulary
        rows]): the logits to compute; the others are -inf (`DecodeKernels.matmul`'s `keep`)."""
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"input_ids must have shape [1, n], not {list(input_ids.shape)}")
        if cache is None:
            cache = self.new_cache()
        rows = input_ids.shape[1]
        h = embed_rows(self.embed_table, input_ids, self.kernels)
        if self.config.embedding_scale != 1.0:
            h = h * self.config.embedding_scale
        with cache.write(rows) as (past, keys, values):
            p = self._pass(rows, past)
            if self.stack is not None and rows <= MAX_ATTENTION_ROWS and past > 0:
                self.kernels.decoder_layers(h, self.stack, p.cos, p.sin, keys, values, past)  # h in place
            else:
                for i, layer in enumerate(self.layers):
                    if cancel is not None and cancel():
                        raise ForwardCancelled()
                    h = layer(h, p, keys[i : i + 1], values[i : i + 1])
        h = norm(h, self.norm, self.norm_bias, self.config.norm_eps, self.config.norm)
        if logits_to_keep:
            h = h[:, -logits_to_keep:, :]
        logits = self.kernels.matmul(h, self.head_matrix, head_rows)
        cap = self.config.final_logit_softcap
        if cap:
            logits = torch.tanh(logits / cap) * cap
            if head_rows is not None:
                logits.masked_fill_(~head_rows, float("-inf"))  # tanh made them -cap
        return CpuOutput(logits, cache)


def load_cpu_decoder(source: Path, kernels: DecodeKernels, kv_dtype: torch.dtype = KV_DTYPE,
                     one_call: bool = True, checked=None) -> CpuDecoder:
    """The model in `source` (a GGUF file, or a Hugging Face directory of a Llama or Qwen2
    model) computed here (`Unsupported` where it can't be, naming the file and why), its KV
    cache of `kv_dtype` (float16 or float32), its short passes in one kernel call unless
    `one_call` is False; `checked`: a GGUF file's `read_gguf` where the caller has it."""
    source = Path(source)
    spec, tensors = gguf_weights(source, checked) if source.is_file() else safetensors_weights(source)
    return CpuDecoder(spec, kernels, tensors, kv_dtype, one_call)
