"""What a decoder-only model computes, read from a GGUF file's metadata or a `config.json`.

`DecoderSpec` is every fact the forward pass (`cpu_decoder`) needs beyond the weights: sizes, the
norm, the rotary embedding (which pairs it rotates, its bases per layer, its scaling), the
feed-forward block, the extra norms some families have, attention windows and scales. The four
families people run as GGUF files differ only in these facts:

| | llama (SmolLM2, Llama 3, CodeLlama, DeepSeek-Coder 1.x) | qwen2 | gemma3 | starcoder2 |
|---|---|---|---|---|
| norm | RMS | RMS | RMS (GGUF stores weight + 1) | LayerNorm with bias |
| biases | - | q, k, v | - | q, k, v, o, up, down |
| rotary pairs (GGUF layout) | adjacent (2i, 2i+1) | halves (i, i + D/2) | halves | halves |
| feed-forward | SiLU(gate) * up | SiLU(gate) * up | GELU-tanh(gate) * up | GELU-tanh(up) |
| extra | rope_freqs factors (Llama 3), linear scaling (DeepSeek-Coder) | | q/k RMS norms, norms after attention and MLP, embeddings x sqrt(width), 5 of 6 layers a 512-position window with rotary base 10,000 | |

The facts are llama.cpp's reading of the same metadata (its `llama-model.cpp` hyper-parameters
and graph builders), since that is what a GGUF file was made for: llama's GGUF q/k matrices are
stored permuted for adjacent-pair rotation (`convert_hf_to_gguf.py` permutes them), Gemma's
norm weights are stored with the +1 already added, Gemma 3's sliding-window layers are those
with `il % 6 < 5` and take rotary base 10,000 (its metadata has no key for either).
`bench/model_file.py` compares our greedy continuations with llama.cpp's on real files.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from pathlib import Path

ARCHITECTURES = ("llama", "qwen2", "gemma3", "starcoder2")


class Unsupported(ValueError):
    """The model is not one this module describes; the message says why."""


class Norm(enum.IntEnum):
    RMS = 0
    LAYER = 1  # LayerNorm with a bias


class Rotary(enum.IntEnum):
    HALVES = 0  # rotate dims (i, i + D/2): GPT-NeoX's layout, transformers' rotate_half
    PAIRS = 1  # rotate dims (2i, 2i + 1): GPT-J's layout, llama GGUF files' q/k rows


class FeedForward(enum.IntEnum):
    SILU_GATED = 0  # down(silu(gate x) * up x)
    GELU_GATED = 1  # down(gelu_tanh(gate x) * up x)
    GELU = 2  # down(gelu_tanh(up x)), no gate


@dataclass(frozen=True)
class DecoderSpec:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    norm: Norm
    norm_eps: float
    rotary: Rotary
    rope_theta: float  # base of the layers with the whole context
    rope_scale: float  # positions are multiplied by it (linear scaling: 1 / factor)
    feed_forward: FeedForward
    attention_scale: float  # the query's scale before q.k
    windows: tuple[int, ...]  # per layer: 0 = every earlier position, else the last `w` positions
    window_rope_theta: float  # rotary base of the windowed layers
    qk_norm: bool = False  # RMS norms of each query and key head (Gemma 3)
    sandwich_norms: bool = False  # RMS norms of the attention's and the MLP's outputs (Gemma 3)
    embedding_scale: float = 1.0  # token embeddings are multiplied by it (Gemma: sqrt(width))
    tie_word_embeddings: bool = False
    final_logit_softcap: float = 0.0  # 0: none; else logits = c * tanh(logits / c)

    @property
    def model_type(self) -> str:  # the name `config.json` gives the family
        return self.architecture

    @property
    def rms_norm_eps(self) -> float:
        return self.norm_eps

    def layer_theta(self, layer: int) -> float:
        return self.window_rope_theta if self.windows[layer] else self.rope_theta

    @property
    def rotary_bases(self) -> tuple[float, ...]:
        """The rotary bases the layers use, each once (a pass's rotary tables, in this order)."""
        return tuple(sorted({self.layer_theta(i) for i in range(self.num_hidden_layers)}))

    def rotary_table(self, layer: int) -> int:
        """Which of the pass's rotary tables a layer reads."""
        return self.rotary_bases.index(self.layer_theta(layer))

    def check(self, where: str) -> DecoderSpec:
        """Itself, or `Unsupported` naming `where` when its sizes can't be computed here (the
        kernels take multiples of 8 and whole groups of query heads per key head)."""
        sizes = (self.hidden_size, self.head_dim, self.intermediate_size,
                 self.num_attention_heads * self.head_dim)
        if min(sizes + (self.vocab_size, self.num_hidden_layers, self.num_key_value_heads)) <= 0:
            raise Unsupported(f"{where}: sizes {sizes} must be positive")
        if any(d % 8 for d in sizes) or self.num_attention_heads % self.num_key_value_heads:
            raise Unsupported(f"{where}: dimensions {sizes} (the kernels take multiples of 8, whole groups of heads)")
        if len(self.windows) != self.num_hidden_layers:
            raise Unsupported(f"{where}: {len(self.windows)} windows for {self.num_hidden_layers} layers")
        return self


# ------------------------------------------------------------------ GGUF metadata


def _key(meta: dict, arch: str, name: str, default=None, required: bool = False):
    v = meta.get(f"{arch}.{name}", default)
    if v is None and required:
        raise Unsupported(f"its metadata lacks {arch}.{name}")
    if hasattr(v, "tolist"):  # a per-layer array: every layer must agree here
        values = set(v.tolist())
        if len(values) != 1:
            raise Unsupported(f"{arch}.{name} differs between layers ({sorted(values)[:4]}...)")
        v = values.pop()
    return v


def spec_from_gguf(meta: dict, tensor_names, where: str) -> DecoderSpec:
    """The spec of a GGUF model from its metadata (`mask_store.gguf_header`) and tensor names;
    `Unsupported` naming `where` (the file) for what isn't computed here."""
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise Unsupported(f"{where}: architecture {arch!r} is not one computed here ({', '.join(ARCHITECTURES)})")
    kind = meta.get("general.type", "model")
    if kind != "model":
        raise Unsupported(f"{where}: general.type is {kind!r}, not a model (a LoRA adapter or projector?)")
    try:
        hidden = int(_key(meta, arch, "embedding_length", required=True))
        layers = int(_key(meta, arch, "block_count", required=True))
        heads = int(_key(meta, arch, "attention.head_count", required=True))
        kv_heads = int(_key(meta, arch, "attention.head_count_kv", heads))
        head_dim = int(_key(meta, arch, "attention.key_length", hidden // max(heads, 1)))
        value_dim = int(_key(meta, arch, "attention.value_length", head_dim))
        ffn = int(_key(meta, arch, "feed_forward_length", required=True))
        rot_dims = int(_key(meta, arch, "rope.dimension_count", head_dim))
        theta = float(_key(meta, arch, "rope.freq_base", 10000.0))
        scaling = str(_key(meta, arch, "rope.scaling.type", "none"))
        factor = float(_key(meta, arch, "rope.scaling.factor", 1.0) or 1.0)
        eps_key = "attention.layer_norm_epsilon" if arch == "starcoder2" else "attention.layer_norm_rms_epsilon"
        eps = float(_key(meta, arch, eps_key, 1e-5))
        window = int(_key(meta, arch, "attention.sliding_window", 0) or 0)
        softcap = float(_key(meta, arch, "final_logit_softcapping", 0.0) or 0.0)
    except (TypeError, ValueError) as e:
        raise Unsupported(f"{where}: its metadata garbles {e}") from e
    vocab = int(meta.get(f"{arch}.vocab_size") or len(meta.get("tokenizer.ggml.tokens") or ()))
    if value_dim != head_dim:
        raise Unsupported(f"{where}: value heads of {value_dim} dims and key heads of {head_dim}")
    if rot_dims != head_dim:
        raise Unsupported(f"{where}: rotary over {rot_dims} of {head_dim} dims (partial rotary)")
    if scaling not in ("none", "linear") and not (scaling == "yarn" and factor == 1.0):
        raise Unsupported(f"{where}: rotary scaling {scaling!r} (computed here: none, linear)")
    if float(_key(meta, arch, "attention.logit_softcapping", 0.0) or 0.0):
        raise Unsupported(f"{where}: attention logit soft-capping")
    names = set(tensor_names)
    tied = "output.weight" not in names
    windows = (0,) * layers
    window_theta = theta
    common = dict(architecture=arch, vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                  head_dim=head_dim, norm_eps=eps, rope_theta=theta,
                  rope_scale=1.0 / factor if scaling == "linear" else 1.0,
                  attention_scale=head_dim ** -0.5, tie_word_embeddings=tied, final_logit_softcap=softcap)
    if arch == "gemma3":
        # llama.cpp: 5 of every 6 layers windowed (il % 6 < 5) with base 10,000; the query scaled
        # by 1/sqrt(head_dim) (1/sqrt(width/heads) for the 27B model, 62 layers)
        if window:
            windows = tuple(window if i % 6 < 5 else 0 for i in range(layers))
        window_theta = float(_key(meta, arch, "rope.freq_base_swa", 10000.0))
        scale = (hidden // heads) ** -0.5 if layers == 62 else head_dim ** -0.5
        return DecoderSpec(**common | dict(attention_scale=scale), norm=Norm.RMS, rotary=Rotary.HALVES,
                           feed_forward=FeedForward.GELU_GATED, windows=windows, window_rope_theta=window_theta,
                           qk_norm=True, sandwich_norms=True, embedding_scale=math.sqrt(hidden)).check(where)
    if arch == "starcoder2":
        return DecoderSpec(**common, norm=Norm.LAYER, rotary=Rotary.HALVES, feed_forward=FeedForward.GELU,
                           windows=windows, window_rope_theta=window_theta).check(where)
    rotary = Rotary.PAIRS if arch == "llama" else Rotary.HALVES
    return DecoderSpec(**common, norm=Norm.RMS, rotary=rotary, feed_forward=FeedForward.SILU_GATED, windows=windows,
                       window_rope_theta=window_theta).check(where)


# ------------------------------------------------------------------ config.json (Hugging Face)

CONFIG_TYPES = ("llama", "qwen2")


def _rope(cfg: dict) -> tuple[float, str]:
    """(theta, rope type) from transformers 5's `rope_parameters` or the older keys."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        return float(params.get("rope_theta", 10000.0)), str(params.get("rope_type", "default"))
    scaling = cfg.get("rope_scaling")
    kind = scaling.get("rope_type", scaling.get("type", "scaled")) if isinstance(scaling, dict) else "default"
    return float(cfg.get("rope_theta", 10000.0)), str(kind)


def spec_from_config(wdir: Path) -> DecoderSpec:
    """The spec of a Hugging Face directory's Llama or Qwen2 model from its `config.json`
    (transformers' layout: q/k rows for rotation by halves); `Unsupported` when `cpu_decoder`
    would not compute exactly what transformers computes for it."""
    try:
        cfg = json.loads((Path(wdir) / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise Unsupported(f"no readable config.json in {wdir}: {e}") from e
    kind = cfg.get("model_type")
    if kind not in CONFIG_TYPES:
        raise Unsupported(f"model type {kind!r} (computed here from config.json: {', '.join(CONFIG_TYPES)})")
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
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        layers = int(cfg["num_hidden_layers"])
        spec = DecoderSpec(
            architecture=kind, vocab_size=int(cfg["vocab_size"]), hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]), num_hidden_layers=layers, num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=head_dim,
            norm=Norm.RMS, norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rotary=Rotary.HALVES, rope_theta=theta,
            rope_scale=1.0, feed_forward=FeedForward.SILU_GATED, attention_scale=head_dim ** -0.5,
            windows=(0,) * layers, window_rope_theta=theta,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise Unsupported(f"config.json lacks or garbles {e}") from e
    return spec.check(str(wdir))
