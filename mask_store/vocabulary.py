"""A tokenizer's vocabulary as raw bytes.

Byte-level BPE tokens (GPT-2, SmolLM2, Qwen, StarCoder...) spell bytes through a printable
alphabet; SentencePiece tokens use `▁` for a space and `<0xNN>` for raw bytes. `Vocabulary`
undoes either spelling, so every token is the exact bytes it adds to the text (some are
partial UTF-8: a token may end in the middle of a character). Special tokens are kept apart:
the grammar never produces them, except end-of-sequence tokens where the text may end.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grammar_tools.cache import content_hash

from .model_files import (
    EOS_NAMES, ModelNotFound, ModelSource, declared_eos, resolve_model, tokenizer_facts, tokenizer_json,
)
from .tokenizer_facts import TokenizerFacts


@functools.lru_cache(maxsize=1)
def byte_level_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the printable character that spells each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_SP_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@dataclass(frozen=True, eq=False)
class Vocabulary:
    token_bytes: tuple[bytes, ...]
    special: frozenset[int]  # control tokens, never allowed by the grammar
    eos: frozenset[int]  # end tokens: allowed where the text can end
    name: str = ""

    @property
    def size(self) -> int:
        return len(self.token_bytes)

    @functools.cached_property
    def hash(self) -> str:
        h = hashlib.sha256()
        for i, b in enumerate(self.token_bytes):
            h.update(len(b).to_bytes(2, "little"))
            h.update(b)
            h.update(b"S" if i in self.special else b"N")
        h.update(repr(sorted(self.eos)).encode())
        return h.hexdigest()[:16]

    @functools.cached_property
    def _sorted(self) -> tuple[list[bytes], np.ndarray]:
        pairs = sorted((b, i) for i, b in enumerate(self.token_bytes) if b and i not in self.special)
        return [b for b, _ in pairs], np.array([i for _, i in pairs], dtype=np.int64)

    @functools.cached_property
    def by_bytes(self) -> dict[bytes, int]:
        out: dict[bytes, int] = {}
        for i, b in enumerate(self.token_bytes):
            if b and i not in self.special:
                out.setdefault(b, i)
        return out

    def tokens_starting_with(self, prefix: bytes) -> list[int]:
        """Ids of the (non-special) tokens whose bytes start with `prefix`."""
        return self._ids_starting_with(prefix).tolist()

    def _ids_starting_with(self, prefix: bytes) -> np.ndarray:
        """Two bisections in the sorted spellings (a one-byte prefix such as a space matches
        ~30,000 tokens: no loop over them)."""
        keys, ids = self._sorted
        lo = bisect.bisect_left(keys, prefix)
        end = _successor(prefix)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end, lo)
        return ids[lo:hi]

    def tokens_compatible_with(self, text: bytes) -> np.ndarray:
        """Ids of the tokens that start with `text` or are a non-empty prefix of it (token
        healing), in no particular order, each once (a spelling longer than `text` can't be
        a prefix of it)."""
        by = self.by_bytes
        shorter = [t for k in range(1, len(text)) if (t := by.get(text[:k])) is not None]
        return np.concatenate([self._ids_starting_with(text), np.array(shorter, dtype=np.int64)])

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_tokenizer(cls, tok, eos_ids=(), name: str = "", text_ids=()) -> Vocabulary:
        """From a `tokenizers.Tokenizer`. `text_ids`: added tokens that are text (a GGUF
        file's user-defined tokens: Gemma 3's runs of spaces and HTML tags, DeepSeek-Coder's
        stray `õ`): their bytes are their spelling, as llama.cpp decodes them, and they are
        never end tokens by name (Gemma 3's `</s>` is HTML)."""
        text_ids = frozenset(text_ids)
        vocab = tok.get_vocab(with_added_tokens=True)
        size = max(vocab.values()) + 1
        added = tok.get_added_tokens_decoder()
        special = {i for i, t in added.items() if t.special}
        pieces = [""] * size
        for s, i in vocab.items():
            pieces[i] = s
        byte_level = "ByteLevel" in repr(tok.decoder) or "ByteLevel" in repr(tok.pre_tokenizer)
        dec = byte_level_decoder()
        out = []
        for i, s in enumerate(pieces):
            if i in text_ids and not byte_level:  # a SentencePiece user-defined piece: `▁` is a space there too
                out.append(s.replace("▁", " ").encode())
            elif i in text_ids or (i in added and not byte_level):
                out.append(s.encode())
            elif i in added:
                out.append(s.encode() if i in special else _byte_level(s, dec))
            elif byte_level:
                out.append(_byte_level(s, dec))
            else:
                out.append(_sentencepiece(s))
        holes = {i for i, s in enumerate(pieces) if s == ""}
        # end tokens by name among the added tokens only: Qwen's BPE spells `</s>` as text (id 128247)
        eos = set(eos_ids) | {i for i, t in added.items() if t.content in EOS_NAMES and i not in text_ids}
        return cls(tuple(out), frozenset(special | holes), frozenset(e for e in eos if e < size), name)

    @classmethod
    def from_tokenizer_json(cls, path: str | Path, eos_ids=()) -> Vocabulary:
        from tokenizers import Tokenizer

        return cls.from_tokenizer(Tokenizer.from_file(str(path)), eos_ids, Path(path).name)


def _byte_level(s: str, dec: dict[str, int]) -> bytes:
    try:
        return bytes(dec[c] for c in s)
    except KeyError:  # not spelled in the byte alphabet (an added token): its text
        return s.encode()


def _sentencepiece(s: str) -> bytes:
    if len(s) == 6 and s.startswith("<0x"):  # the one regex only where it can match (262k tokens)
        m = _SP_BYTE.fullmatch(s)
        if m:
            return bytes([int(m.group(1), 16)])
    return s.replace("▁", " ").encode()


@dataclass(frozen=True, eq=False)
class LoadedTokenizer:
    """A model's tokenizer with its vocabulary: encode text the way the model does.

    Document text is text: a file that spells a special token (`<|endoftext|>` in a comment,
    `<filename>` in a regex) is encoded as those characters, never as the control token
    (`load_tokenizer` sets `encode_special_tokens` on the tokenizer it builds; control tokens
    such as fill-in-the-middle markers are put in by id)."""

    source: ModelSource
    tokenizer: object  # tokenizers.Tokenizer, with encode_special_tokens set
    vocab: Vocabulary
    facts: TokenizerFacts = TokenizerFacts(kind="hf")  # start, end and FIM ids (tokenizer_facts)

    def encode(self, text: str) -> list[int]:
        """The ids of `text` as the model's tokenizer cuts it, spelling exactly its bytes (a
        SentencePiece tokenizer's dummy prefix space is not put in: `encode_document_start`)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_document_start(self, text: str) -> list[int]:
        """The ids of `text` at the start of a document as the model's own tokenizer gives them:
        where it puts a space first (SentencePiece's dummy prefix: `add_space_prefix`, Llama 2
        and CodeLlama; not Gemma 3), that space is in the first token (`▁def`), so these ids
        spell one more byte than the text. The start token is not put in (`facts.add_bos`)."""
        return self.encode(" " + text if self.facts.add_space_prefix and text else text)


# an added token spelled like a control marker: `<|fim_prefix|>`, `<tool_call>`, `</tool_call>`
CONTROL_MARKER = re.compile(r"<\|[^\s|]+\|>|</?[A-Za-z_][A-Za-z0-9_.-]*>")


def with_control_tokens_special(spec: dict) -> dict:
    """The tokenizer spec with its added tokens spelled as control markers flagged special.

    Qwen2.5-Coder's tokenizer adds `<|fim_prefix|>`, `<|file_sep|>`, `<tool_call>`... without
    the special flag; left so, the grammar would allow them as text (`<|fim_middle|>` in a
    string) and a document that spells one would be encoded with the control token. Flagged,
    they are control tokens like the others: put in by id, never produced, their spelling in a
    document is text. Added tokens of other shapes (runs of spaces in some code tokenizers)
    stay text."""
    added = spec.get("added_tokens") or []
    if not any(not t.get("special") and CONTROL_MARKER.fullmatch(t.get("content", "")) for t in added):
        return spec
    marked = [dict(t, special=True) if CONTROL_MARKER.fullmatch(t.get("content", "")) else t for t in added]
    return dict(spec, added_tokens=marked)


@functools.lru_cache(maxsize=4)
def load_tokenizer(spec: str | None = None) -> LoadedTokenizer:
    """The tokenizer of a model spec (`default`, a .gguf file or a HF directory). A HF
    directory's added tokens spelled as control markers are special
    (`with_control_tokens_special`); a GGUF file's token types say it (`gguf_tokenizer`)."""
    from tokenizers import Tokenizer

    src = resolve_model(spec)
    path = tokenizer_json(src)
    facts = tokenizer_facts(src)
    if src.kind == "gguf":
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers refuses what was made of the file: say which file, drop it
            path.unlink(missing_ok=True)
            raise ModelNotFound(f"cannot read the tokenizer of {src.path}: {str(e).splitlines()[0]}") from e
    else:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        marked = with_control_tokens_special(raw)
        tok = Tokenizer.from_file(str(path)) if marked is raw else Tokenizer.from_str(json.dumps(marked))
    tok.encode_special_tokens = True  # special tokens' spellings in a document are its text
    vocab = Vocabulary.from_tokenizer(tok, declared_eos(src), src.name, facts.text_ids)
    return LoadedTokenizer(src, tok, vocab, facts)


def vocabulary_key(vocab: Vocabulary) -> str:
    return content_hash(vocab.hash, str(vocab.size))


def _successor(prefix: bytes) -> bytes | None:
    """The least byte string above every string that starts with `prefix` (None: none, the
    prefix is empty or all 0xff bytes)."""
    p = prefix.rstrip(b"\xff")
    if not p:
        return None
    return p[:-1] + bytes([p[-1] + 1])
