"""A float64 reference forward pass of a GGUF model file, in numpy, for the tests.

Written from llama.cpp's reading of the four families (its graph builders: `llm_build_llama`,
`_qwen2`, `_gemma3`, `_starcoder2`), apart from the runtime's code: the file read with `gguf`'s
own `GGUFReader` and de-quantized with `gguf.quants.dequantize`; llama's q/k rows rotated as the
file stores them (adjacent pairs), which the runtime instead reorders for rotation by halves;
every product in float64. The runtime computes in float32 from the same values (and, for short
passes, with 8-bit activations): the tests compare with a tolerance.
"""

from __future__ import annotations

import math

import numpy as np
from gguf import GGUFReader, dequantize


def _field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


class ReferenceModel:
    def __init__(self, path) -> None:
        r = GGUFReader(str(path))
        self.arch = arch = _field(r, "general.architecture")
        self.t = {}
        for t in r.tensors:
            v = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.t[t.name] = v.reshape(tuple(int(d) for d in reversed(t.shape)))
        g = lambda k, d=None: _field(r, f"{arch}.{k}", d)  # noqa: E731
        self.layers, self.e = g("block_count"), g("embedding_length")
        self.heads, self.kv_heads = g("attention.head_count"), g("attention.head_count_kv")
        self.d = g("attention.key_length", self.e // self.heads)
        self.eps = g("attention.layer_norm_epsilon" if arch == "starcoder2" else "attention.layer_norm_rms_epsilon")
        self.theta = g("rope.freq_base", 10000.0)
        self.window = g("attention.sliding_window", 0) or 0

    def layer_window(self, i: int) -> int:
        return self.window if self.arch == "gemma3" and i % 6 < 5 else 0

    def layer_theta(self, i: int) -> float:
        return 10000.0 if self.arch == "gemma3" and i % 6 < 5 else self.theta

    def _rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def _norm(self, x, name):
        if self.arch == "starcoder2":
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return (x - mu) / np.sqrt(var + self.eps) * self.t[name + ".weight"] + self.t[name + ".bias"]
        return self._rms(x, self.t[name + ".weight"])

    def _lin(self, x, name):
        y = x @ self.t[name + ".weight"].T
        return y + self.t[name + ".bias"] if name + ".bias" in self.t else y

    def _rope(self, x, positions, theta):
        """x [n, heads, d]; llama: pairs (2i, 2i+1) (GGUF's layout), others: halves (i, i + d/2)."""
        d = x.shape[-1]
        freqs = np.outer(positions, theta ** (-np.arange(0, d, 2) / d))  # [n, d/2]
        cos, sin = np.cos(freqs)[:, None, :], np.sin(freqs)[:, None, :]
        out = x.copy()
        if self.arch == "llama":
            a, b = x[..., 0::2], x[..., 1::2]
            out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        else:
            a, b = x[..., : d // 2], x[..., d // 2:]
            out[..., : d // 2], out[..., d // 2:] = a * cos - b * sin, a * sin + b * cos
        return out

    @staticmethod
    def _gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    def logits(self, ids: list[int]) -> np.ndarray:
        """The logits of every position of `ids` [n, vocab] (float64)."""
        n, d = len(ids), self.d
        h = self.t["token_embd.weight"][ids]
        if self.arch == "gemma3":
            h = h * math.sqrt(self.e)
        pos = np.arange(n)
        for i in range(self.layers):
            p = f"blk.{i}."
            x = self._norm(h, p + "attn_norm")
            q = self._lin(x, p + "attn_q").reshape(n, self.heads, d)
            k = self._lin(x, p + "attn_k").reshape(n, self.kv_heads, d)
            v = self._lin(x, p + "attn_v").reshape(n, self.kv_heads, d)
            if self.arch == "gemma3":
                q, k = self._rms(q, self.t[p + "attn_q_norm.weight"]), self._rms(k, self.t[p + "attn_k_norm.weight"])
            q, k = self._rope(q, pos, self.layer_theta(i)), self._rope(k, pos, self.layer_theta(i))
            group = self.heads // self.kv_heads
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
            allowed = pos[None, :] <= pos[:, None]
            w = self.layer_window(i)
            if w:
                allowed &= pos[:, None] - pos[None, :] < w
            scores = np.where(allowed[None], scores, -np.inf)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            a = np.einsum("hqk,khd->qhd", scores, v).reshape(n, -1)
            o = self._lin(a, p + "attn_output")
            if self.arch == "gemma3":
                o = self._rms(o, self.t[p + "post_attention_norm.weight"])
            h = h + o
            x = self._norm(h, p + "ffn_norm")
            if self.arch == "starcoder2":
                f = self._lin(self._gelu(self._lin(x, p + "ffn_up")), p + "ffn_down")
            else:
                gate = self._lin(x, p + "ffn_gate")
                act = self._gelu(gate) if self.arch == "gemma3" else gate / (1 + np.exp(-gate))
                f = self._lin(act * self._lin(x, p + "ffn_up"), p + "ffn_down")
            if self.arch == "gemma3":
                f = self._rms(f, self.t[p + "post_ffw_norm.weight"])
            h = h + f
        h = self._norm(h, "output_norm")
        head = self.t.get("output.weight", self.t["token_embd.weight"])
        return h @ head.T
