"""Where the GPT-2 byte-level pre-tokenizer splits the text at the junction of two tokens.

Byte-level BPE tokenizers (GPT-2, SmolLM2, StarCoder) first cut the text into pre-tokens with
GPT-2's regex, `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`,
then apply the merges inside each pre-token only. For two adjacent tokens a, b (each one
pre-token on its own), the text a+b is cut in one of three ways at their junction:

- `BOUNDARY`: a pre-token ends between them; no merge can join them;
- `JOINED`: a and b lie in one pre-token; the merges decide (mask_store.canonical);
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
  needs the token after the pair (mask_store.canonical, `ENDS_WHITESPACE_RUN`).

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

from enum import IntEnum

CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
_CONTRACTION_TAILS = tuple(c[1:] for c in CONTRACTIONS)


class CharClass(IntEnum):
    LETTER = 0  # \p{L}
    DIGIT = 1  # \p{N}
    PUNCT = 2  # neither, nor whitespace
    SPACE = 3  # whitespace (\s)


class RunKind(IntEnum):
    """What a token's text ends with, as the junction sees it (the token on the left)."""

    LETTERS = 0  # [ ]letters
    DIGITS = 1  # [ ]digits
    PUNCT = 2  # [ ]punctuation (an apostrophe inside a run of punctuation included)
    APOSTROPHE = 3  # `'` starting a match: a contraction may follow
    CONTRACTION = 4  # 's 't 're 've 'm 'll 'd
    SPACE = 5  # a single space: joins the run after it
    WHITESPACE_CHAR = 6  # one whitespace character other than a space
    WHITESPACE_RUN = 7  # two or more whitespace characters
    OPEN_CHAR = 8  # ends inside a multi-byte character
    UNKNOWN = 9  # ends with a character whose first byte is in an earlier token


WHITESPACE_KINDS = (RunKind.SPACE, RunKind.WHITESPACE_CHAR, RunKind.WHITESPACE_RUN)


class Head(IntEnum):
    """How a token's text starts, as the junction sees it (the token on the right)."""

    LETTER = 0
    DIGIT = 1
    PUNCT = 2
    APOSTROPHE_RUN = 3  # `'` then punctuation or nothing
    CONTRACTION = 4  # the whole token is a contraction
    SPACE_RUN = 5  # a space, then a letter, digit or punctuation run
    WHITESPACE = 6  # whitespace only
    CONTINUATION = 7  # starts inside a multi-byte character
    UNKNOWN = 8  # starts with a character the token does not complete


class Contraction(IntEnum):
    """For a token starting with a letter: what `'` before it would make."""

    NONE = 0  # `'` + r: no contraction
    EXACT = 1  # `'` + s, re, ...: the token completes a contraction
    LONGER = 2  # `'` + self: the contraction `'s` ends inside the token


class Junction(IntEnum):
    BOUNDARY = 0
    JOINED = 1
    STRADDLE = 2
    INVALID = 3  # not UTF-8: never in a tokenizer's output
    UNKNOWN = 4


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


def head(data: bytes, classes: dict[str, CharClass]) -> Head:
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


def contraction(data: bytes) -> Contraction:
    """What `'` followed by this token's text is (only for tokens starting with a letter)."""
    try:
        s = data.decode()
    except UnicodeDecodeError:
        return Contraction.NONE
    for tail in _CONTRACTION_TAILS:
        if s.startswith(tail):
            return Contraction.EXACT if s == tail else Contraction.LONGER
    return Contraction.NONE


B, J, S = Junction.BOUNDARY, Junction.JOINED, Junction.STRADDLE
# columns: LETTER DIGIT PUNCT APOSTROPHE_RUN CONTRACTION SPACE_RUN WHITESPACE (valid UTF-8 heads)
_TABLE = {
    RunKind.LETTERS: (J, B, B, B, B, B, B),
    RunKind.DIGITS: (B, J, B, B, B, B, B),
    RunKind.PUNCT: (B, B, J, J, S, B, B),
    RunKind.APOSTROPHE: (None, B, J, J, S, B, B),  # LETTER: by `Contraction`
    RunKind.CONTRACTION: (B, B, B, B, B, B, B),
    RunKind.SPACE: (J, J, J, J, S, B, J),
    RunKind.WHITESPACE_CHAR: (B, B, B, B, B, B, J),
    RunKind.WHITESPACE_RUN: (S, S, S, S, S, B, J),
}


def junction(kind: RunKind, h: Head, c: Contraction = Contraction.NONE, digits_isolated: bool = False) -> Junction:
    """How the pre-tokenizer cuts the text of a token of kind `kind` followed by one that
    starts as `h` (see the module docstring); `digits_isolated`: every digit is cut alone first
    (StarCoder's pre-tokenizer)."""
    if digits_isolated and (kind is RunKind.DIGITS or h is Head.DIGIT):
        return B
    if kind is RunKind.OPEN_CHAR:
        return J if h is Head.CONTINUATION else Junction.INVALID
    if h is Head.CONTINUATION:
        return J if kind is RunKind.UNKNOWN else Junction.INVALID
    if kind is RunKind.UNKNOWN or h is Head.UNKNOWN:
        return Junction.UNKNOWN
    if kind is RunKind.APOSTROPHE and h is Head.LETTER:
        return (B, J, S)[c]
    return _TABLE[kind][h]


def observed_junction(pre_tokenizer, left: str, right: str) -> Junction:
    """The junction of `left` + `right` as the pre-tokenizer itself cuts the text."""
    ends = {end for _, (_, end) in pre_tokenizer.pre_tokenize_str(left + right)}
    n, m = len(left), len(left) + len(right)
    if any(0 < e < n or n < e < m for e in ends):
        return S
    return B if n in ends else J


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
