"""A GGUF file's tokenizer read from the file's own metadata, not through transformers.

transformers converts a GGUF tokenizer with code that changes between its versions: 5.17 gives
the SmolLM2 tokenizer a normalizer ("it normalizes text"), which turns canonical tokenization
off (`canonical._supported`) and rebuilds the mask store; 5.24 does not. The product would then
depend on which transformers the user has. A GGUF file says everything a byte-level BPE needs
(llama.cpp reads nothing else): `tokenizer.ggml.model` (`gpt2`: byte-level BPE),
`tokenizer.ggml.pre` (the pre-tokenizer's regex, by name), `.tokens`, `.merges`, `.token_type`
(3: control, 4: user-defined) and the end/start ids. `gguf_tokenizer` builds the `tokenizers`
Tokenizer from those with the GPT-2 byte-level pre-tokenizer for the pre-tokenizers known to use
GPT-2's regex (`GPT2_PRES`); others raise `GgufTokenizerUnsupported` and the caller falls back
to transformers' conversion (then the tokenizer does depend on its version: docs/gpu.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# llama.cpp's names of pre-tokenizers that split with GPT-2's regex ('s|'t|...| ?\p{L}+| ?\p{N}+|...)
GPT2_PRES = ("gpt2", "gpt-2", "smollm")
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types


class GgufTokenizerUnsupported(ValueError):
    """The GGUF's tokenizer is not a byte-level BPE with GPT-2's pre-tokenizer; says which."""


@dataclass(frozen=True)
class GgufTokenizer:
    spec: dict  # tokenizer.json, as `tokenizers` reads it
    eos_token_id: int | None
    bos_token_id: int | None

    def to_json(self) -> str:
        return json.dumps(self.spec, ensure_ascii=False)


def _field(reader, name: str):
    f = reader.fields.get(name)
    return None if f is None else f.contents()


def gguf_tokenizer(path: Path) -> GgufTokenizer:
    """The tokenizer stored in the GGUF file `path` (raises GgufTokenizerUnsupported, or
    ValueError/OSError for a file gguf can't read)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    kind, pre = _field(reader, "tokenizer.ggml.model"), _field(reader, "tokenizer.ggml.pre")
    if kind != "gpt2":
        raise GgufTokenizerUnsupported(f"its tokenizer model is {kind!r}, not byte-level BPE ('gpt2')")
    if pre not in GPT2_PRES:
        raise GgufTokenizerUnsupported(f"its pre-tokenizer {pre!r} is not one known to use GPT-2's regex")
    tokens = list(_field(reader, "tokenizer.ggml.tokens") or [])
    merges = list(_field(reader, "tokenizer.ggml.merges") or [])
    types = list(_field(reader, "tokenizer.ggml.token_type") or [1] * len(tokens))
    if not tokens or not merges or len(types) != len(tokens):
        raise GgufTokenizerUnsupported("its tokens, merges or token types are missing")
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": types[i] == CONTROL}
        for i, t in enumerate(tokens) if types[i] in (CONTROL, USER_DEFINED)
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": {**byte_level, "add_prefix_space": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": [m.split(" ", 1) for m in merges],
        },
    }
    eos, bos = _field(reader, "tokenizer.ggml.eos_token_id"), _field(reader, "tokenizer.ggml.bos_token_id")
    return GgufTokenizer(spec, None if eos is None else int(eos), None if bos is None else int(bos))
