"""A tiny random-weight model for the tests that run the whole path: fast, and real enough
(the real SmolLM2 tokenizer)."""

from __future__ import annotations

from pathlib import Path


def make_tiny_model_dir(path: Path, seed: int = 0) -> Path:
    """A tiny random-weight Llama with the real SmolLM2 tokenizer, as a Hugging Face model
    directory (config.json, model.safetensors, tokenizer.json): fast stand-in for a real model."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mask_store.model_files import resolve_model, tokenizer_json

    if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=8192,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    shutil.copy(tokenizer_json(resolve_model("default")), path / "tokenizer.json")
    return path
