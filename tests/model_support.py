"""A tiny random-weight model for the tests that run the whole path: fast, and real enough
(the real SmolLM2 tokenizer)."""

from __future__ import annotations

from pathlib import Path

from grammar_tools import cache


def make_tiny_model_dir(path: Path, seed: int = 0, hidden_size: int = 64, heads: int = 4) -> Path:
    """A tiny random-weight Llama with the real SmolLM2 tokenizer, as a Hugging Face model
    directory (config.json, model.safetensors, tokenizer.json): fast stand-in for a real model.
    (vLLM's CPU attention takes heads of 32 dimensions or more: hidden_size=128, heads=2.)"""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mask_store.model_files import resolve_model, tokenizer_json

    if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file():
        return path
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=49152, hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=8192,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
    )
    with cache.folder_written_aside(path) as tmp:  # test workers may make it at once
        LlamaForCausalLM(cfg).save_pretrained(tmp, safe_serialization=True)
        shutil.copy(tokenizer_json(resolve_model("default")), tmp / "tokenizer.json")
    return path


def float16_exact_blocks(values, fmt):
    """`values` [n, k] (k a multiple of 32) quantized to the block format `fmt` with power-of-two
    scales (Q4_1's minimum -8 d), so that float16 holds every de-quantized value exactly: (the
    `BlockMatrix`, the float16 tensor of its values). The kernels must give both the same bits."""
    import torch

    from lsp_server.model.kernels.block_weights import BLOCK_VALUES, BlockMatrix, WeightFormat

    n, k = values.shape
    v = values.float().reshape(-1, BLOCK_VALUES)
    top = 7 if fmt is WeightFormat.Q4_1 else 127
    d = 2.0 ** torch.ceil(torch.log2(v.abs().amax(dim=1, keepdim=True).clamp_min(2.0 ** -14) / top))
    head = d.half().view(torch.uint8).reshape(-1, 2)
    if fmt is WeightFormat.Q4_1:
        q = (torch.round(v / d) + 8).clamp(0, 15).to(torch.uint8)
        packed = q[:, :16] | (q[:, 16:] << 4)
        head = torch.cat([head, (-8 * d).half().view(torch.uint8).reshape(-1, 2)], dim=1)
        same = d * (q.float() - 8)
    else:
        q = torch.round(v / d).clamp(-127, 127).to(torch.int8)
        packed = q.view(torch.uint8)
        same = d * q.float()
    raw = torch.cat([head, packed], dim=1).reshape(n, -1).contiguous()
    return BlockMatrix.of(raw, fmt, k), same.reshape(n, k).half()
