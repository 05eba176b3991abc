"""A GGUF file's tokenizer read from the file's own metadata, never through transformers.

transformers converts a GGUF tokenizer with code that changes between its versions (5.17 gave
SmolLM2's tokenizer a normalizer that 5.24 does not), so the product would depend on which
transformers the user has. A GGUF file says everything its tokenizer needs (llama.cpp reads
nothing else), and `gguf_tokenizer` turns that into a `tokenizers` Tokenizer spec
(tokenizer.json) plus the `TokenizerFacts` the runtime needs. Two kinds:

- `tokenizer.ggml.model = gpt2`: byte-level BPE: `.tokens`, `.merges`, and the pre-tokenizer
  by llama.cpp's name in `tokenizer.ggml.pre` (`PRE_TOKENIZERS`): GPT-2's regex (`gpt2`,
  `gpt-2`, `mpt`, `default` or none); StarCoder's (`starcoder`, `refact`, `smollm`, `codeshell`:
  every digit alone, then GPT-2's regex: SmolLM2's own tokenizer does this, and it changes
  `\\n` + 8 spaces + `1` from `\\n       `,` `,`1` to `\\n        `,`1`); Llama 3's (`llama-bpe`,
  `llama3`, `llama-v3`: whole pre-tokens found in the vocabulary are taken as they are,
  `ignore_merges`); Qwen2's (`qwen2`, with NFC first as Qwen's own tokenizer.json has it,
  though llama.cpp does not normalize); DeepSeek's (`deepseek-coder`, `deepseek-llm`). The
  patterns are llama.cpp's (src/llama-vocab.cpp), written as the models' tokenizer.json files
  write them: a Split per pattern, then ByteLevel. Any other name: `GgufTokenizerUnsupported`
  naming it.
- `tokenizer.ggml.model = llama`: SentencePiece BPE (Llama 2, CodeLlama, Gemma 3): `.tokens`,
  `.scores` (no merges), `.token_type`; `▁` spells a space, `<0xNN>` tokens are the byte
  fallback. Built as a `tokenizers` BPE with byte_fallback whose merges are every split of a
  normal token into two normal tokens, ranked by the token's score (highest first): BPE then
  merges, among the adjacent pairs, the one whose token scores highest, as SentencePiece does.
  The normalizer turns spaces into `▁`; there is no pre-tokenizer (SentencePiece merges across
  `▁`: Llama 2 has `▁▁` tokens). The dummy prefix (`tokenizer.ggml.add_space_prefix`, true
  by default as in llama.cpp; Gemma 3 says false) is NOT in the spec: the ids of a text spell
  its bytes exactly, which the grammar needs; `TokenizerFacts.add_space_prefix` says the
  model's tokenizer puts a space first, and encoding " " + text gives exactly its ids.

Token types (`tokenizer.ggml.token_type`, SentencePiece's numbering): 1 normal, 2 unknown,
3 control, 4 user-defined, 5 unused, 6 byte. Control, unknown and unused tokens are special
(never text: the grammar never produces them, a document that spells one is encoded as its
characters). User-defined tokens are text that is always one token (Gemma 3's runs of spaces,
newlines and tabs, its HTML tags; Qwen's `<tool_call>`): added tokens matched before the BPE,
as llama.cpp and SentencePiece do, whose bytes are their spelling (`TokenizerFacts.text_ids`).
As llama.cpp does, a user-defined token the file declares (start, end, FIM ids) or spelled as
a FIM marker llama.cpp knows (`FIM_SPELLINGS`: DeepSeek-Coder's `<｜fim▁begin｜>` is
user-defined in its file) is control.

Checked id for id against a reference encoder for each kind: tests/test_gguf_tokenizer.py
(SentencePiece's own library; tiktoken with Qwen's ranks; a plain-Python BPE for StarCoder's
pre-tokenizer) and bench/gguf_tokenizers.py (llama.cpp's test vectors, the stdlib on the real
Gemma 3 and Qwen2.5-Coder files).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .gguf_header import GgufHeaderError, read_header
from .tokenizer_facts import FIM_ROLES, TokenizerFacts

log = logging.getLogger(__name__)

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # token types
SPECIAL_TYPES = (UNKNOWN, CONTROL, UNUSED)

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DEEPSEEK_CODER_SPLITS = ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK)
DEEPSEEK_LLM_SPLITS = (
    "[\r\n]",
    "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377"
    "\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556"
    "\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a"
    "\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4"
    "\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
    "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    r"\s+$",
    CJK,
    r"\p{N}+",
)

_BYTE_LEVEL_REGEX = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_BYTE_LEVEL_PLAIN = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
_DIGITS = {"type": "Digits", "individual_digits": True}


def _split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


@dataclass(frozen=True)
class PreTokenizer:
    """A byte-level BPE's pre-tokenizer (tokenizer.json's), with what goes with it."""

    family: str
    pre_tokenizer: dict
    normalizer: dict | None = None
    ignore_merges: bool = False  # a whole pre-token found in the vocabulary is one token (Llama 3)
    add_bos: bool = False  # llama.cpp's default where the file does not say


_GPT2 = PreTokenizer("gpt2", _BYTE_LEVEL_REGEX)
_STARCODER = PreTokenizer("starcoder", {"type": "Sequence", "pretokenizers": [_DIGITS, _BYTE_LEVEL_REGEX]})
_LLAMA3 = PreTokenizer("llama3", {"type": "Sequence", "pretokenizers": [_split(LLAMA3_PATTERN), _BYTE_LEVEL_PLAIN]},
                       ignore_merges=True, add_bos=True)
_QWEN2 = PreTokenizer("qwen2", {"type": "Sequence", "pretokenizers": [_split(QWEN2_PATTERN), _BYTE_LEVEL_PLAIN]},
                      normalizer={"type": "NFC"})
_DEEPSEEK_CODER = PreTokenizer("deepseek-coder", {"type": "Sequence", "pretokenizers": [
    *(_split(p) for p in DEEPSEEK_CODER_SPLITS), _DIGITS, _BYTE_LEVEL_PLAIN]})
_DEEPSEEK_LLM = PreTokenizer("deepseek-llm", {"type": "Sequence", "pretokenizers": [
    *(_split(p) for p in DEEPSEEK_LLM_SPLITS), _BYTE_LEVEL_PLAIN]})

# llama.cpp's names (`tokenizer.ggml.pre`) of the byte-level pre-tokenizers read here
PRE_TOKENIZERS = {
    "gpt2": _GPT2, "gpt-2": _GPT2, "default": _GPT2, "mpt": _GPT2,
    "starcoder": _STARCODER, "refact": _STARCODER, "smollm": _STARCODER, "codeshell": _STARCODER,
    "llama-bpe": _LLAMA3, "llama3": _LLAMA3, "llama-v3": _LLAMA3,
    "qwen2": _QWEN2,
    "deepseek-coder": _DEEPSEEK_CODER,
    "deepseek-llm": _DEEPSEEK_LLM,
}

# spellings llama.cpp takes for FIM markers (made control where the file has them as text)
FIM_SPELLINGS = frozenset((
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", "<|file_sep|>",
))

_K = "tokenizer.ggml."
_FIM_KEYS = {"pre": ("fim_pre_token_id", "prefix_token_id"), "suf": ("fim_suf_token_id", "suffix_token_id"),
             "mid": ("fim_mid_token_id", "middle_token_id"), "pad": ("fim_pad_token_id",),
             "rep": ("fim_rep_token_id",), "sep": ("fim_sep_token_id",)}


class GgufTokenizerError(ValueError):
    """The GGUF file's tokenizer can't be read; one sentence that names the file and says why."""


class GgufTokenizerUnsupported(GgufTokenizerError):
    """The GGUF file's tokenizer is of a kind (model or pre-tokenizer) not read here; says which."""


@dataclass(frozen=True)
class GgufTokenizer:
    spec: dict  # tokenizer.json, as `tokenizers` reads it
    facts: TokenizerFacts

    @property
    def eos_token_id(self) -> int | None:
        return self.facts.eos_id

    @property
    def bos_token_id(self) -> int | None:
        return self.facts.bos_id

    def to_json(self) -> str:
        return json.dumps(self.spec, ensure_ascii=False)


def gguf_tokenizer(path: str | Path) -> GgufTokenizer:
    """The tokenizer stored in the GGUF file `path` (GgufTokenizerError, or its subclass
    GgufTokenizerUnsupported, naming the file; OSError where it can't be opened)."""
    path = Path(path)
    try:
        meta = read_header(path).metadata
    except GgufHeaderError as e:
        raise GgufTokenizerError(str(e)) from None
    return tokenizer_from_metadata(meta, str(path))


def tokenizer_from_metadata(meta: dict, name: str) -> GgufTokenizer:
    """The tokenizer of a GGUF file's metadata (`name`: the file, for the messages)."""
    kind = meta.get(_K + "model")
    if kind is None:
        raise GgufTokenizerError(f"{name} has no tokenizer (no tokenizer.ggml.model in its metadata)")
    if kind not in ("gpt2", "llama"):
        raise GgufTokenizerUnsupported(
            f"{name}: its tokenizer model {kind!r} (tokenizer.ggml.model) is not one syntaxlock reads "
            "(byte-level BPE 'gpt2' or SentencePiece BPE 'llama')")
    tokens = meta.get(_K + "tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise GgufTokenizerError(f"{name}: its token list (tokenizer.ggml.tokens) is missing or empty")
    n = len(tokens)
    types = _int_array(meta, "token_type", n, name)
    if types is None:
        types = np.full(n, NORMAL, dtype=np.int32)
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]  # as llama.cpp names them
    types[[i for i, t in enumerate(meta[_K + "tokens"]) if not t]] = UNUSED
    seen: dict[str, int] = {}
    for i, t in enumerate(tokens):
        j = seen.setdefault(t, i)
        if j != i:
            raise GgufTokenizerError(f"{name}: its vocabulary holds {t!r} twice (ids {j} and {i})")
    facts = _facts(meta, kind, tokens, types, name)
    special, text = _added(tokens, types, facts)
    facts = TokenizerFacts(**{**facts.__dict__, "text_ids": tuple(text)})
    # SentencePiece matches user-defined pieces on the normalized text, where a `▁` in the text is a
    # space too (rich's spinners spell runs of `▁`): `tokenizers` normalizes their spelling (spaces
    # to `▁`) and matches them there; llama.cpp matches them on the raw text (docs/models.md)
    normalized = set(text) if kind == "llama" else set()
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": i in normalized, "special": i in special} for i in sorted(special | set(text))]
    if kind == "gpt2":
        spec = _bpe_spec(meta, tokens, added, facts.pre, name)
    else:
        spec = _spm_spec(meta, tokens, types, added, facts, name)
    return GgufTokenizer(spec, facts)


def _int_array(meta: dict, key: str, n: int, name: str) -> np.ndarray | None:
    v = meta.get(_K + key)
    if v is None:
        return None
    a = np.asarray(v)
    if a.ndim != 1 or a.dtype.kind not in "iuf" or len(a) < n:
        raise GgufTokenizerError(f"{name}: tokenizer.ggml.{key} is not a list of {n} numbers")
    return a[:n].astype(np.int64 if a.dtype.kind in "iu" else np.float64)


def _scalar_id(meta: dict, key: str, n: int) -> int | None:
    v = meta.get(_K + key)
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= int(v) < n:
        return int(v)
    return None


def _flag(meta: dict, key: str, default: bool) -> bool:
    v = meta.get(_K + key)
    return bool(v) if isinstance(v, (bool, np.bool_, int, np.integer)) else default


def _facts(meta: dict, kind: str, tokens: list[str], types: np.ndarray, name: str) -> TokenizerFacts:
    n = len(tokens)
    spm = kind == "llama"
    pre = meta.get(_K + "pre")
    if kind == "gpt2":
        pre = "default" if pre in (None, "") else str(pre)
        if pre not in PRE_TOKENIZERS:
            raise GgufTokenizerUnsupported(
                f"{name}: its pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not one syntaxlock reads "
                f"(it reads {', '.join(sorted(PRE_TOKENIZERS))})")
    ids = {k: _scalar_id(meta, k + "_token_id", n) for k in ("bos", "eos", "eot", "eom", "padding", "unknown")}
    if spm:  # llama.cpp's defaults for a SentencePiece vocabulary that does not say
        for k, default in (("bos", 1), ("eos", 2), ("unknown", 0)):
            if ids[k] is None and default < n:
                ids[k] = default
    if ids["unknown"] is None:
        unk = np.flatnonzero(types == UNKNOWN)
        ids["unknown"] = int(unk[0]) if unk.size else None
    fim = {}
    for role in FIM_ROLES:
        for key in _FIM_KEYS[role]:
            v = _scalar_id(meta, key, n)
            if v is not None:
                fim[role] = v
                break
    ends = tuple(dict.fromkeys(i for i in (ids["eos"], ids["eot"], ids["eom"]) if i is not None))
    add_bos = _flag(meta, "add_bos_token", spm or (kind == "gpt2" and PRE_TOKENIZERS[pre].add_bos))
    return TokenizerFacts(
        kind="spm" if spm else "bpe", pre=pre if kind == "gpt2" else None, bos_id=ids["bos"], eos_id=ids["eos"],
        end_ids=ends, add_bos=add_bos and ids["bos"] is not None,
        add_space_prefix=_flag(meta, "add_space_prefix", True) if spm else False,
        pad_id=ids["padding"], unk_id=ids["unknown"], fim=fim)


def _added(tokens: list[str], types: np.ndarray, facts: TokenizerFacts) -> tuple[set[int], list[int]]:
    """(special ids, text ids): control, unknown and unused tokens are special; user-defined
    ones are text unless declared (start, end, FIM) or spelled as a FIM marker."""
    declared = {i for i in (facts.bos_id, facts.eos_id, facts.unk_id, *facts.end_ids, *facts.fim.values())
                if i is not None}
    special = set(np.flatnonzero(np.isin(types, SPECIAL_TYPES)).tolist())
    text = []
    for i in np.flatnonzero(types == USER_DEFINED).tolist():
        if i in declared or tokens[i] in FIM_SPELLINGS:
            special.add(i)
        else:
            text.append(i)
    return special, text


def _bpe_spec(meta: dict, tokens: list[str], added: list[dict], pre: str, name: str) -> dict:
    merges = meta.get(_K + "merges")
    if not isinstance(merges, list) or not merges:
        raise GgufTokenizerError(f"{name}: its byte-level BPE has no merges (tokenizer.ggml.merges)")
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for k, m in enumerate(merges):
        cut = m.find(" ", 1)  # as llama.cpp reads them: the first space after the first character
        a, b = (m[:cut], m[cut + 1:]) if cut > 0 else (m, "")
        if a not in vocab or b not in vocab or a + b not in vocab:
            raise GgufTokenizerError(f"{name}: its merge {k} ({m!r}) names a token outside its vocabulary")
        pairs.append([a, b])
    p = PRE_TOKENIZERS[pre]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": p.normalizer,
        "pre_tokenizer": p.pre_tokenizer,
        "post_processor": None,
        "decoder": {**_BYTE_LEVEL_REGEX, "add_prefix_space": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": p.ignore_merges,
            "vocab": vocab, "merges": pairs,
        },
    }


def _spm_spec(meta: dict, tokens: list[str], types: np.ndarray, added: list[dict], facts: TokenizerFacts,
              name: str) -> dict:
    scores = _int_array(meta, "scores", len(tokens), name)
    if scores is None:
        raise GgufTokenizerError(f"{name}: its SentencePiece vocabulary has no scores (tokenizer.ggml.scores)")
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = spm_merges(tokens, scores, types)
    byte_ids = [vocab.get(f"<0x{b:02X}>") for b in range(256)]
    byte_fallback = all(i is not None and types[i] == BYTE for i in byte_ids)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {
            "type": "BPE", "dropout": None,
            "unk_token": tokens[facts.unk_id] if facts.unk_id is not None else None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
            "byte_fallback": byte_fallback, "ignore_merges": False,
            "vocab": vocab, "merges": merges,
        },
    }


def spm_merges(tokens: list[str], scores: np.ndarray, types: np.ndarray) -> list[list[str]]:
    """The merges of a SentencePiece BPE vocabulary: every split of a normal token into two
    normal tokens, ranked by the token's score (highest first; then by id, then by where it is
    cut). SentencePiece merges the adjacent pair whose joined piece scores highest (the leftmost
    among equals); BPE with these ranks makes the same choices, except between two different
    splits of one token that overlap (`ab`+`a`, `a`+`ba` in `aba`), where SentencePiece takes the
    leftmost and BPE the lower rank."""
    normal = types == NORMAL
    index = {t: i for i, t in enumerate(tokens) if normal[i]}
    found = []
    for t, i in index.items():
        for k in range(1, len(t)):
            if t[:k] in index and t[k:] in index:
                found.append((-float(scores[i]), i, k))
    found.sort()
    return [[tokens[i][:k], tokens[i][k:]] for _, i, k in found]
