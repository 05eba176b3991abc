"""transformers' model classes on the CPU with our kernels: decoder layers of Llama-family
models in one kernel call for decoding steps (`use_fused_layers`), and short passes' attention
by `row_attention` (`use_row_attention`).

A decoding step of SmolLM2-135M runs ~40 PyTorch operations per layer (norms, three
projections, rotary embedding, cache update, attention, MLP, residuals): on this 2-core CPU their
dispatch cost as much as the weights' reading. `use_fused_layers(model)` gives each decoder layer
of a Llama model with `half_weights`' float16 weights (and a `GrowingCache`) a forward that
hands passes of at most `MAX_ATTENTION_ROWS` rows to `library`' `decoder_layer`; prompts,
other caches and models that aren't plain Llama keep transformers' own code. Cancellation hooks
(`runtime.StopBetweenLayers`) still run before every layer.
"""

from __future__ import annotations

import logging
from functools import partial

import torch

from .build import load
from .half_weights import HalfLinear
from .library import MAX_ATTENTION_ROWS, DecodeKernels, LayerWeights
from ..hf_cache import GrowingCache
from ..kv_cache import GrowingBuffers

log = logging.getLogger(__name__)

ATTENTION_NAME = "syntaxlock_rows"  # the attention implementation registered with transformers


def _projections(layer) -> list:
    a, m = layer.self_attn, layer.mlp
    return [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]


def layer_fits(layer, config) -> bool:
    """The kernel computes exactly this layer's arithmetic: plain Llama (no biases, no q/k norms,
    SiLU MLP), `HalfLinear` projections (float16 weights, the kernel), dimensions multiples of 8."""
    try:
        attn = layer.self_attn
        projections = _projections(layer)
    except AttributeError:
        return False
    dims = (config.hidden_size, attn.head_dim, config.intermediate_size)
    return (
        getattr(config, "model_type", None) == "llama"
        and config.hidden_act == "silu"
        and getattr(config, "pretraining_tp", 1) == 1
        and not hasattr(attn, "q_norm")
        and all(isinstance(p, HalfLinear) and p.bias is None for p in projections)
        and all(d % 8 == 0 for d in dims)
        and type(layer.input_layernorm).__name__.endswith("RMSNorm")
    )


def _fused_forward(layer, kernels: DecodeKernels, weights: LayerWeights, original, hidden_states: torch.Tensor,
                   attention_mask=None, position_ids=None, use_cache=False, position_embeddings=None,
                   **kwargs):
    attn = layer.self_attn
    # transformers >= 5.24 hands the layer its cache as `cache`, earlier 5.x as `past_key_values`
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    kv = None
    if (isinstance(cache, GrowingCache) and hidden_states.shape[0] == 1
            and hidden_states.shape[1] <= MAX_ATTENTION_ROWS and hidden_states.dtype == torch.float32
            and position_embeddings is not None and attn.layer_idx < len(cache.layers)):
        kv = cache.layers[attn.layer_idx]
    if not isinstance(kv, GrowingBuffers) or kv.get_seq_length() == 0:
        return original(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                        use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    h = hidden_states.contiguous().clone()
    cos, sin = (t.to(torch.float32).contiguous() for t in position_embeddings)
    kernels.append_layer(h, weights, cos, sin, kv)
    return h


def use_fused_layers(model: torch.nn.Module) -> int:
    """Give every decoder layer of `model` that `layer_fits` the fused forward for few-row
    passes; the number of layers changed (0 where the kernels can't be built or the model
    isn't a plain Llama)."""
    kernels = load()
    config = getattr(model, "config", None)
    if kernels is None or config is None:
        return 0
    changed = 0
    for module in model.modules():
        if type(module).__name__.endswith("DecoderLayer") and layer_fits(module, config):
            attn = module.self_attn
            weights = kernels.layer_weights(
                module.input_layernorm.weight, module.post_attention_layernorm.weight,
                module.input_layernorm.variance_epsilon, [p.weight for p in _projections(module)],
                config.num_attention_heads, config.num_key_value_heads, attn.head_dim,
                config.intermediate_size, attn.scaling,
            )
            module.forward = partial(_fused_forward, module, kernels, weights, module.forward)
            changed += 1
    return changed


def _attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                       scaling: float | None = None, **kwargs):
    """transformers' attention interface: `row_attention` for short causal passes, SDPA else."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kernels = _registered_kernels
    if (kernels is not None and dropout == 0.0 and kwargs.get("sliding_window") is None
            and kwargs.get("softcap") is None and getattr(module, "is_causal", True)
            and kernels.attention_fits(query, key, value)):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return kernels.row_attention(query, key, value, scale), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                  scaling=scaling, **kwargs)


_registered_kernels: DecodeKernels | None = None


def use_row_attention(model: torch.nn.Module) -> bool:
    """Route `model`'s attention through `row_attention` for short passes (a CPU float32 model
    using SDPA); True when it now does."""
    global _registered_kernels
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", False):
        return False
    kernels = load()
    if kernels is None:
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    _registered_kernels = kernels
    AttentionInterface.register(ATTENTION_NAME, _attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)
    model.set_attn_implementation(ATTENTION_NAME)
    return True
