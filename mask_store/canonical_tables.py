"""The canonical pairs' tables, built from a tokenizer (about a second) and cached.

Where the GPT-2 byte-level pre-tokenizer splits the text at the junction of two tokens.

Byte-level BPE tokenizers (GPT-2, SmolLM2, StarCoder) first cut the text into pre-tokens with
GPT-2's regex, `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`,
then apply the merges inside each pre-token only. For two adjacent tokens a, b (each one
pre-token on its own), the text a+b is cut in one of three ways at their junction:

- `BOUNDARY`: a pre-token ends between them; no merge can join them;
- `JOINED`: a and b lie in one pre-token; the merges decide (canonical.py);
- `STRADDLE`: a pre-token boundary falls inside a or b: the tokenizer never produces the pair.

The cut depends on the class of a's last run (`RunKind`) and on how b starts (`Head`); the table
`junction` writes it out, from the regex:
- letter, digit and punctuation runs go on while the class does (a space in front of a run
  belongs to it, so a single space token joins the next run);
- `'` starts a contraction only where a match starts: `'` then `s` is the pre-token `'s`
  (`'` then `same` is `'s` + `ame`), but `('` then `s` is `('` + `s`; `Continuation` in
  mask_store.canonical carries this across tokens;
- a run of whitespace followed by a non-space gives its last character away: `\\n   ` then
  `x` is cut `\\n  ` + ` x`, `\\n\\n` then `x` is `\\n` + `\\n` + `x`. Within the pair this is
  read off b's first character; the case where b itself is that last character (`\\n` then
  `\\n`, cut only once the next token starts with a non-space) is the one pair rule that
  needs the token after the pair (canonical.py, `ENDS_WHITESPACE_RUN`).

StarCoder's pre-tokenizer (StarCoder2, SmolLM2: llama.cpp's `starcoder`/`smollm`) first cuts
every digit (`\\p{N}`) into a piece of its own, then applies GPT-2's regex to each piece
(`digits_isolated`): a junction beside a digit is then always a boundary, and a run of
whitespace before a digit ends with its piece, so it keeps its last character (`\\n        `
then `1`, where GPT-2's regex alone cuts `\\n       ` + ` 1`).

Characters are classed by asking the tokenizer's own pre-tokenizer (`char_classes`), so the
Unicode tables are the tokenizer's. Tokens that are not whole UTF-8 (a multi-byte character
cut by a token boundary) are classed by their bytes: a junction inside a character is always
inside a pre-token (`JOINED`); one whose side is a character the token does not complete is
`UNKNOWN` (allowed: the class of that character is not in the pair). Invalid UTF-8 junctions
(a character left open, a continuation byte after a complete character) are `INVALID`.
`check_against` compares the table with the pre-tokenizer itself on representative pairs.
"""

from __future__ import annotations

import json
import sys
from enum import IntEnum
from pathlib import Path

import numpy as np

from grammar_tools import cache

from .canonical import CanonicalPairs, CanonicalTables, Contraction, Head, Junction, RunKind, junction
from .vocabulary import Vocabulary

FORMAT_VERSION = 2  # 2: digits_isolated


class CanonicalUnsupported(ValueError):
    """The tokenizer is not one whose canonical pairs this module can decide; says why."""



CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
_CONTRACTION_TAILS = tuple(c[1:] for c in CONTRACTIONS)


class CharClass(IntEnum):
    LETTER = 0  # \p{L}
    DIGIT = 1  # \p{N}
    PUNCT = 2  # neither, nor whitespace
    SPACE = 3  # whitespace (\s)



def char_classes(pre_tokenizer, chars) -> dict[str, CharClass]:
    """The class of each character, asked of the pre-tokenizer (a letter continues `a`, a digit
    `1`, punctuation `(`); ValueError for a character that behaves as none of the four."""
    out = {}
    for c in chars:
        probes = (("a", CharClass.LETTER), ("1", CharClass.DIGIT), ("(", CharClass.PUNCT), ("\n", CharClass.SPACE))
        for probe, cls in probes:
            if len(pre_tokenizer.pre_tokenize_str(probe + c)) == 1:
                out[c] = cls
                break
        else:
            raise ValueError(f"the pre-tokenizer puts {c!r} in no class of GPT-2's regex")
    return out


def _utf8_length(lead: int) -> int:
    """The length of the character a byte starts (0: a continuation byte or invalid)."""
    if lead < 0x80:
        return 1
    if 0xC0 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    if 0xF0 <= lead < 0xF8:
        return 4
    return 0


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


def run_kind(data: bytes, classes: dict[str, CharClass]) -> RunKind:
    """The kind of a token on the left of a junction (the token read from a match start)."""
    try:
        s = data.decode()
    except UnicodeDecodeError:
        lead = max((i for i, b in enumerate(data) if not _is_continuation(b)), default=-1)
        if lead >= 0 and len(data) - lead < _utf8_length(data[lead]):
            return RunKind.OPEN_CHAR
        return RunKind.UNKNOWN
    if not s:
        return RunKind.UNKNOWN
    if s == "'":
        return RunKind.APOSTROPHE
    if s in CONTRACTIONS:
        return RunKind.CONTRACTION
    if all(classes[c] is CharClass.SPACE for c in s):
        if len(s) > 1:
            return RunKind.WHITESPACE_RUN
        return RunKind.SPACE if s == " " else RunKind.WHITESPACE_CHAR
    return (RunKind.LETTERS, RunKind.DIGITS, RunKind.PUNCT, RunKind.UNKNOWN)[classes[s[-1]]]


def head_of(data: bytes, classes: dict[str, CharClass]) -> Head:
    """How a token on the right of a junction starts."""
    if data and _is_continuation(data[0]):
        return Head.CONTINUATION
    try:
        s = data.decode()
    except UnicodeDecodeError:
        # a space, then a character the token does not complete (` \xe5`): it starts with
        # whitespace whatever that character is (a whitespace run that must end refuses it; a
        # space run never straddles a junction, so nothing canonical is refused for it)
        return Head.SPACE_RUN if data[:1] == b" " and len(data) > 1 else Head.UNKNOWN
    if not s:
        return Head.UNKNOWN
    c0 = classes[s[0]]
    if c0 is CharClass.SPACE:
        if all(classes[c] is CharClass.SPACE for c in s):
            return Head.WHITESPACE
        return Head.SPACE_RUN if s[0] == " " and classes[s[1]] is not CharClass.SPACE else Head.UNKNOWN
    if s in CONTRACTIONS:
        return Head.CONTRACTION
    if s[0] == "'":
        return Head.APOSTROPHE_RUN
    return (Head.LETTER, Head.DIGIT, Head.PUNCT)[c0]


def contraction_of(data: bytes) -> Contraction:
    """What `'` followed by this token's text is (only for tokens starting with a letter)."""
    try:
        s = data.decode()
    except UnicodeDecodeError:
        return Contraction.NONE
    for tail in _CONTRACTION_TAILS:
        if s.startswith(tail):
            return Contraction.EXACT if s == tail else Contraction.LONGER
    return Contraction.NONE


def observed_junction(pre_tokenizer, left: str, right: str) -> Junction:
    """The junction of `left` + `right` as the pre-tokenizer itself cuts the text."""
    ends = {end for _, (_, end) in pre_tokenizer.pre_tokenize_str(left + right)}
    n, m = len(left), len(left) + len(right)
    if any(0 < e < n or n < e < m for e in ends):
        return Junction.STRADDLE
    return Junction.BOUNDARY if n in ends else Junction.JOINED


def check_against(pre_tokenizer, samples, digits_isolated: bool = False) -> list[str]:
    """Disagreements between `junction` and the pre-tokenizer on pairs of texts (each a whole
    pre-token alone): `samples` yields (left, right, kind, head, contraction)."""
    out = []
    for left, right, k, h, c in samples:
        want = observed_junction(pre_tokenizer, left, right)
        got = junction(k, h, c, digits_isolated)
        if got is not want:
            out.append(f"{left!r} + {right!r}: the table says {got.name}, the pre-tokenizer {want.name}")
    return out


def code_hash() -> str:
    return cache.source_hash(sys.modules[__name__])[:8]


# ---------------------------------------------------------------------------------- build


# why a tokenizer that splits by its own pattern (Qwen2's, Llama 3's) is refused (docs/models.md)
OWN_PATTERN_REASON = (
    "the pair table (canonical.junction) is GPT-2's; under Qwen2's pattern one punctuation character "
    "joins the letters after it only where it starts a match (`(self` but `((` + `self`), every digit "
    "stands alone and punctuation runs take the newlines after them, so a pair's cut depends on the "
    "tokens before it")


def _own_split_pattern(pre: dict) -> str | None:
    """The regex of a Split pre-tokenizer followed by a ByteLevel one without its own regex
    (how Qwen2 and Llama 3 tokenizers are written), or None."""
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    if (len(parts) == 2 and parts[0].get("type") == "Split" and parts[1].get("type") == "ByteLevel"
            and not parts[1].get("use_regex", True)):
        return str((parts[0].get("pattern") or {}).get("Regex", ""))
    return None


# why a SentencePiece-style BPE (Gemma 3, Llama 2) is refused (docs/models.md)
SENTENCEPIECE_REASON = (
    "it is a SentencePiece BPE (spaces spelled `▁`, byte fallback, no pre-tokenizer): its merges run over "
    "the whole text, across words, so no table of pre-token junctions says which pairs it makes")


def _digits_then_byte_level(pre: dict) -> bool:
    """Whether the pre-tokenizer is StarCoder's: every digit alone, then GPT-2's byte-level regex."""
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    return (len(parts) == 2 and parts[0].get("type") == "Digits" and parts[0].get("individual_digits")
            and parts[1].get("type") == "ByteLevel" and parts[1].get("use_regex", True)
            and not parts[1].get("add_prefix_space"))


def _supported(spec: dict) -> bool:
    """Raises CanonicalUnsupported (saying why) unless the tokenizer is byte-level BPE with
    GPT-2's pre-tokenizer, every digit cut alone first or not; returns whether they are."""
    model = spec.get("model") or {}
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "Sequence" and len(pre.get("pretokenizers", [])) == 1:
        pre = pre["pretokenizers"][0]
    if model.get("type") == "BPE" and (model.get("byte_fallback") or pre.get("type") == "Metaspace"
                                       or "▁" in json.dumps(spec.get("normalizer"), ensure_ascii=False)):
        raise CanonicalUnsupported("canonical tokenization needs byte-level BPE with GPT-2's pre-tokenizer: "
                                   + SENTENCEPIECE_REASON)
    digits = _digits_then_byte_level(pre)
    problems = []
    if model.get("type") != "BPE":
        problems.append(f"its model is {model.get('type')}, not BPE")
    if (model.get("dropout") not in (None, 0, 0.0) or model.get("continuing_subword_prefix")
            or model.get("end_of_word_suffix")):
        problems.append("its BPE uses dropout or word affixes")
    if model.get("ignore_merges"):
        problems.append("its BPE takes whole words from the vocabulary (ignore_merges)")
    split = _own_split_pattern(pre)
    if split is not None:
        problems.append(f"its pre-tokenizer cuts by a pattern of its own ({split[:60]}...), not GPT-2's regex: "
                        + OWN_PATTERN_REASON)
    elif not digits and (pre.get("type") != "ByteLevel" or not pre.get("use_regex", True)
                         or pre.get("add_prefix_space")):
        problems.append(f"its pre-tokenizer is {json.dumps(pre)[:120]}, not GPT-2's byte-level regex")
    if spec.get("normalizer"):
        problems.append("it normalizes text")
    if problems:
        raise CanonicalUnsupported("canonical tokenization needs byte-level BPE with GPT-2's pre-tokenizer: "
                                   + "; ".join(problems))
    return digits


def _merge_ids(spec: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    vocab = spec["model"]["vocab"]
    lefts, rights, outs = [], [], []
    for m in spec["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a not in vocab or b not in vocab or a + b not in vocab:
            raise CanonicalUnsupported(f"the merge {a!r} + {b!r} names a token outside the vocabulary")
        lefts.append(vocab[a])
        rights.append(vocab[b])
        outs.append(vocab[a + b])
    return (np.array(lefts, dtype=np.int32), np.array(rights, dtype=np.int32), np.array(outs, dtype=np.int32))


def _edge_classes(tokenizer, vocab: Vocabulary, free: np.ndarray, digits_isolated: bool = False):
    V = vocab.size
    texts = {}
    for i, b in enumerate(vocab.token_bytes):
        if not free[i]:
            try:
                texts[i] = b.decode()
            except UnicodeDecodeError:
                pass
    # with digits cut alone first, a digit continues nothing: the classes are GPT-2's regex's own
    classer = _gpt2_byte_level() if digits_isolated else tokenizer.pre_tokenizer
    classes = char_classes(classer, sorted({c for s in texts.values() for c in s}))
    kind = np.full(V, RunKind.UNKNOWN, dtype=np.int8)
    head = np.full(V, Head.UNKNOWN, dtype=np.int8)
    contraction = np.zeros(V, dtype=np.int8)
    single_space = np.zeros(V, dtype=bool)
    for i, b in enumerate(vocab.token_bytes):
        if free[i]:
            continue
        kind[i] = run_kind(b, classes)
        head[i] = head_of(b, classes)
        contraction[i] = contraction_of(b)
        s = texts.get(i)
        single_space[i] = s is not None and len(s) == 1 and classes[s] is CharClass.SPACE
    reachable = np.ones(V, dtype=bool)
    ids = list(texts)
    for i, enc in zip(ids, tokenizer.encode_batch([texts[i] for i in ids], add_special_tokens=False)):
        reachable[i] = enc.ids == [i]
    return texts, kind, head, contraction, single_space, reachable


def _gpt2_byte_level():
    from tokenizers.pre_tokenizers import ByteLevel

    return ByteLevel(add_prefix_space=False, use_regex=True)


def _check_table(tokenizer, texts, kind, head, contraction, reachable, digits_isolated: bool = False) -> None:
    """Compare the junction table with the pre-tokenizer on two pairs of every (kind, head,
    contraction) the vocabulary has: a tokenizer that looks like GPT-2's but cuts otherwise is
    refused, not served wrong masks."""
    lefts, rights = {}, {}
    for i in texts:
        if reachable[i]:
            lefts.setdefault(int(kind[i]), []).append(i)
            rights.setdefault((int(head[i]), int(contraction[i])), []).append(i)
    samples = []
    for k, ls in lefts.items():
        for (h, c), rs in rights.items():
            for j in range(2):
                a, b = ls[(j * 7919) % len(ls)], rs[(j * 104729) % len(rs)]
                samples.append((texts[a], texts[b], RunKind(k), Head(h), Contraction(c)))
    bad = check_against(tokenizer.pre_tokenizer, samples, digits_isolated)
    if bad:
        raise CanonicalUnsupported("the pre-tokenizer cuts pairs unlike GPT-2's regex: " + "; ".join(bad[:3]))


def build_tables(tokenizer, vocab: Vocabulary, text: str | None = None) -> CanonicalTables:
    """The tables of a `tokenizers.Tokenizer` (CanonicalUnsupported if it is not byte-level
    BPE with GPT-2's pre-tokenizer, or its merges are not in an order BPE can use); `text`:
    its `to_str()` where the caller has it (a second at 262k tokens)."""
    spec = json.loads(tokenizer.to_str() if text is None else text)
    digits = _supported(spec)
    V = vocab.size
    L, R, out = _merge_ids(spec)  # per merge: its left and right parts and the token it makes
    M = len(out)
    birth = np.full(V, -1, dtype=np.int32)
    left = np.full(V, -1, dtype=np.int32)
    right = np.full(V, -1, dtype=np.int32)
    birth[out], left[out], right[out] = np.arange(M, dtype=np.int32), L, R
    if np.any(birth[L] >= np.arange(M)) or np.any(birth[R] >= np.arange(M)):
        raise CanonicalUnsupported("a merge ranks before a merge that makes one of its parts")
    free = np.zeros(V, dtype=bool)
    free[list(vocab.special)] = True
    free[[a["id"] for a in spec.get("added_tokens", []) if a["id"] < V]] = True
    texts, kind, head, contraction, single_space, reachable = _edge_classes(tokenizer, vocab, free, digits)
    _check_table(tokenizer, texts, kind, head, contraction, reachable, digits)

    # left spines: (y, token, death of y in token), grouped by y, latest death first
    never = np.int32(M + 1)
    ys, toks, deaths = [], [], []
    for b in np.flatnonzero(~free).tolist():
        y, death = b, never
        while y >= 0:
            ys.append(y)
            toks.append(b)
            deaths.append(death)
            death, y = birth[y], left[y]
    ys_a, toks_a, deaths_a = np.array(ys, np.int32), np.array(toks, np.int32), np.array(deaths, np.int32)
    order = np.lexsort((-deaths_a.astype(np.int64), ys_a))
    ys_a, toks_a, deaths_a = ys_a[order], toks_a[order], deaths_a[order]
    spine_start = np.searchsorted(ys_a, np.arange(V + 1)).astype(np.int64)
    # merges by their left part, in rank order
    morder = np.lexsort((np.arange(M), L))
    merge_start = np.searchsorted(L[morder], np.arange(V + 1)).astype(np.int64)
    return CanonicalTables(
        kind, head, contraction, single_space, free, reachable, birth, left, right,
        spine_start, toks_a, deaths_a, merge_start, R[morder].astype(np.int32), morder.astype(np.int32),
        np.array(digits),
    )


# ---------------------------------------------------------------------------------- cache


def tables_path(tokenizer, text: str | None = None) -> Path:
    """The cached tables' file, keyed by the tokenizer's whole serialization (`text`: its
    `to_str()` where the caller has it) and the code that builds them."""
    key = cache.content_hash(tokenizer.to_str() if text is None else text, code_hash(), str(FORMAT_VERSION))
    return cache.cache_dir() / "canonical" / f"canonical-{key}.npz"


_MODEL_OPTIONS = ("dropout", "byte_fallback", "continuing_subword_prefix", "end_of_word_suffix", "ignore_merges")


def spec_outline(tokenizer) -> dict:
    """The parts of a `tokenizers.Tokenizer`'s spec that `_supported` reads (the model's type and
    options, the pre-tokenizer, the normalizer), without serializing its vocabulary and merges:
    `to_str()` and its parse take ~3 s for a 262k SentencePiece vocabulary, which `_supported`
    then refuses."""
    model = tokenizer.model
    options = {k: getattr(model, k) for k in _MODEL_OPTIONS if hasattr(model, k)}
    out: dict = {"model": {"type": type(model).__name__, **options}}
    for part in ("pre_tokenizer", "normalizer"):
        component = getattr(tokenizer, part)
        out[part] = None if component is None else json.loads(component.__getstate__())
    return out


def load_tables(tokenizer, vocab: Vocabulary) -> CanonicalTables:
    """The tables of a tokenizer, from the cache or built (about a second) and cached;
    CanonicalUnsupported, before anything is serialized, where its outline says so
    (`spec_outline`)."""
    _supported(spec_outline(tokenizer))
    text = tokenizer.to_str()
    path = tables_path(tokenizer, text)
    data = cache.read_npz(path)
    if data is not None and set(CanonicalTables.FIELDS) <= set(data) and data["kind"].shape[0] == vocab.size:
        return CanonicalTables(**{f: data[f] for f in CanonicalTables.FIELDS})
    tables = build_tables(tokenizer, vocab, text)
    cache.write_npz(path, **{f: getattr(tables, f) for f in CanonicalTables.FIELDS})
    return tables


def load_canonical(tok) -> CanonicalPairs:
    """The canonical pairs of a `LoadedTokenizer` (CanonicalUnsupported: say why, serve without)."""
    return CanonicalPairs(load_tables(tok.tokenizer, tok.vocab))
