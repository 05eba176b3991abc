"""Canonical tokenization: the pair rows against the tokenizer itself (`encode(a + b) == [a, b]`)."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest
from corpus_support import read_source, stdlib_files

from mask_store import canonical as C
from mask_store import canonical_tables as T
from mask_store.vocabulary import Vocabulary, load_tokenizer

# a small corpus with what the rules are about: indentation and blank lines, tabs, CRLF,
# contractions and apostrophes in strings, punctuation runs, digits, multi-byte characters
CORPUS = [
    "def f(x):\n    return x + 1\n\n\nclass A:\n    def g(self, y):\n        if y:\n            return 'it's'\n",
    "x = {'a': 1, \"b\": [2, 3]}  # it's a dict, isn't it? they're here, we've seen, I'm sure, we'll see, he'd go\n",
    "print('self', ('s', 't'), \"'re'\", ''.join(['ll', 've']))\n\t\tindented = True\r\n\r\n",
    "caf\u00e9 = '\u4e2d\u6587\u5b57' + '\u2014' * 3  # \u2192 \u00b5s, \U0001f600 ok\n    \n\n  \t x\u00a0y\u3000z\n",
    "if a >= 10 and b != 0x1F: pass\n    elif c <= 2e10: c += 1\n    else:\n        d //= 3 ** 4\n",
]


def _train_small(vocab_size: int = 420):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    return tok


def _texts(vocab: Vocabulary, tables: C.CanonicalTables) -> dict[int, str]:
    out = {}
    for i, b in enumerate(vocab.token_bytes):
        if not tables.free[i]:
            try:
                out[i] = b.decode()
            except UnicodeDecodeError:
                pass
    return out


def _row_verdicts(pairs: C.CanonicalPairs, ab):
    """For each (a, b): allowed after a (as a whole state, a read from a match start)."""
    out = [False] * len(ab)
    by_a = collections.defaultdict(list)
    for k, (a, _b) in enumerate(ab):
        by_a[a].append(k)
    for a, ks in by_a.items():
        row = pairs.allowed_after(C.CanonicalState(a, C.Continuation.FREE))
        for k in ks:
            out[k] = bool(row[ab[k][1]])
    return out


def _non_space_after_space(tok, texts) -> str:
    """A character c that a space before it does not merge with (`' ' + c` is two tokens)."""
    for s in sorted(set(texts.values())):
        if len(s) == 1 and not s.isspace() and len(tok.encode(" " + s, add_special_tokens=False).ids) == 2:
            return s
    raise AssertionError("every character merges with a space before it")


def _agree_with_encode(tok, pairs: C.CanonicalPairs, texts, ab) -> collections.Counter:
    """Compare the rows with `encode(a + b) == [a, b]` on pairs of whole-UTF-8 tokens; the only
    disagreement allowed is the whitespace run that ends with b (allowed, and then checked in
    the context that makes it canonical: a non-space after b)."""
    ab = [(a, b) for a, b in ab if a in texts and b in texts]
    encs = tok.encode_batch([texts[a] + texts[b] for a, b in ab], add_special_tokens=False)
    mine = _row_verdicts(pairs, ab)
    counts = collections.Counter()
    lone = _non_space_after_space(tok, texts)
    for (a, b), enc, allowed in zip(ab, encs, mine):
        truth = enc.ids == [a, b]
        counts["canonical" if truth else "not canonical"] += 1
        if allowed == truth:
            continue
        state = pairs.after(C.CanonicalState(a, C.Continuation.FREE), b)
        assert allowed and state.continuation is C.Continuation.ENDS_WHITESPACE_RUN, (texts[a], texts[b], enc.tokens)
        tail = lone if texts[b] == " " else "x"
        ids = tok.encode(texts[a] + texts[b] + tail, add_special_tokens=False).ids
        assert ids[:2] == [a, b], (texts[a], texts[b], tail)  # canonical once the run ends
        assert not pairs.allowed_after(state)[b]  # and the run may not go on
        counts["whitespace run end"] += 1
    return counts


def test_small_bpe_every_pair_agrees_with_encode():
    """A byte-level BPE trained in the test: every pair of tokens against the tokenizer."""
    tok = _train_small()
    vocab = Vocabulary.from_tokenizer(tok)
    pairs = C.CanonicalPairs(T.build_tables(tok, vocab))
    texts = _texts(vocab, pairs.tables)
    assert len(texts) > 250  # 128 ASCII bytes and about 150 merges
    ids = sorted(texts)
    counts = _agree_with_encode(tok, pairs, texts, [(a, b) for a in ids for b in ids])
    assert counts["not canonical"] > 1000 and counts["canonical"] > 1000
    assert counts["whitespace run end"] > 0


def test_small_bpe_triples_agree_with_encode():
    """Sequences of three tokens as whole texts: never masked when canonical; allowed though
    not canonical only beside a multi-byte character that the pair does not complete."""
    tok = _train_small()
    vocab = Vocabulary.from_tokenizer(tok)
    pairs = C.CanonicalPairs(T.build_tables(tok, vocab))
    t = pairs.tables
    ids = [i for i in range(vocab.size) if not t.free[i]]
    rng = random.Random(7)
    triples, texts = [], []
    while len(triples) < 60_000:
        tr = [rng.choice(ids) for _ in range(3)]
        try:
            texts.append(b"".join(vocab.token_bytes[i] for i in tr).decode())
        except UnicodeDecodeError:
            continue
        triples.append(tr)
    lax = canonical = 0
    for tr, enc in zip(triples, tok.encode_batch(texts, add_special_tokens=False)):
        truth = enc.ids == tr
        canonical += truth
        if pairs.is_canonical(tr, whole_text=True) != truth:
            assert not truth, [vocab.token_bytes[i] for i in tr]
            partial = [i for i in tr if t.kind[i] in (C.RunKind.OPEN_CHAR, C.RunKind.UNKNOWN)]
            assert partial, [vocab.token_bytes[i] for i in tr]
            lax += 1
    assert canonical > 1000
    assert lax < len(triples) // 100


@pytest.fixture(scope="module")
def default_pairs():
    tok = load_tokenizer("default")
    return tok, T.load_canonical(tok)


@pytest.mark.slow
def test_default_tokenizer_random_pairs_agree_with_encode(default_pairs):
    tok, pairs = default_pairs
    texts = _texts(tok.vocab, pairs.tables)
    ids = sorted(texts)
    rng = random.Random(21)
    random_pairs = [(rng.choice(ids), rng.choice(ids)) for _ in range(120_000)]
    counts = _agree_with_encode(tok.tokenizer, pairs, texts, random_pairs)
    assert counts["canonical"] + counts["not canonical"] >= 100_000
    assert counts["not canonical"] > 1000


@pytest.mark.slow
def test_default_tokenizer_all_pairs_of_frequent_tokens_agree_with_encode(default_pairs):
    """All pairs of the 2,000 tokens most frequent in stdlib code (4 million pairs)."""
    tok, pairs = default_pairs
    texts = _texts(tok.vocab, pairs.tables)
    freq = collections.Counter()
    files = [p for p in stdlib_files(include_tests=False) if p.stat().st_size > 5000]
    for p in random.Random(2).sample(files, 60):
        data = read_source(p)
        if data is not None:
            freq.update(tok.encode(data.decode()))
    top = [i for i, _ in freq.most_common() if i in texts][:2000]
    assert len(top) == 2000
    counts = collections.Counter()
    for k in range(0, len(top), 250):
        counts += _agree_with_encode(tok.tokenizer, pairs, texts, [(a, b) for a in top[k : k + 250] for b in top])
    assert sum(counts[k] for k in ("canonical", "not canonical")) == 2000 * 2000
    assert counts["whitespace run end"] > 0 and counts["not canonical"] > 10_000


def _state(pairs, vocab, texts):
    ids = [vocab.by_bytes[t.encode()] for t in texts]
    return pairs.state_after(ids)


def test_the_rules_on_examples(default_pairs):
    tok, pairs = default_pairs
    vocab = tok.vocab
    by = vocab.by_bytes

    def allowed(before, nxt):
        return bool(pairs.allowed_after(_state(pairs, vocab, before))[by[nxt.encode()]])

    assert allowed(["x", " ="], " return") and allowed(["x", " ="], " ret")
    assert not allowed([" ret"], "urn")  # ` return` is one token
    assert allowed([":"], "\n   ") and allowed([":", "\n   "], " return")
    assert not allowed([":", "\n   "], "return")  # the run gives its last space to the word
    # blank lines before a statement: `\n` `\n` `def`, the second newline ends the run
    assert allowed(["x", "\n"], "\n") and allowed(["x", "\n", "\n"], "def")
    assert not allowed(["x", "\n", "\n"], "\n") and not allowed(["x", "\n", "\n"], " def")
    # a contraction only where `'` starts a match
    assert not allowed(["x", "'"], "s") and allowed(["x", "'s"], "elf")
    assert not allowed(["x", "'"], "self")  # `'self` is `'s` + `elf`
    assert allowed([" =", " '"], "self")
    # a token never produced for its own text is never allowed: none in SmolLM2's vocabulary
    assert pairs.tables.reachable.all()
    # a run that must end refuses every token starting with whitespace, those that are not whole
    # UTF-8 included (` \xe5`: a space, then the first byte of a CJK character)
    state = _state(pairs, vocab, ["x", "\n", "\n"])
    assert state.continuation is C.Continuation.ENDS_WHITESPACE_RUN
    row = pairs.allowed_after(state)
    assert b" \xe5" in by and not row[by[b" \xe5"]]
    assert not any(row[i] for i, b in enumerate(vocab.token_bytes) if b[:1] in b" \t\n\r" and b)
    assert row[by[b"def"]] and row[by[b"#"]]


def test_cached_tables_equal_built_ones(default_pairs, tmp_path, monkeypatch):
    tok, pairs = default_pairs
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path))
    first = T.load_tables(tok.tokenizer, tok.vocab)
    assert T.tables_path(tok.tokenizer).is_file()
    again = T.load_tables(tok.tokenizer, tok.vocab)
    for f in C.CanonicalTables.FIELDS:
        assert np.array_equal(getattr(first, f), getattr(again, f)), f
        assert np.array_equal(getattr(first, f), getattr(pairs.tables, f)), f


def test_conflicts_row_and_single_pair_agree(default_pairs):
    tok, pairs = default_pairs
    rng = random.Random(3)
    for a in rng.sample(range(17, tok.vocab.size), 40):
        row = pairs.conflicts(a)
        for b in rng.sample(range(17, tok.vocab.size), 200) + np.flatnonzero(row)[:50].tolist():
            assert pairs.conflict(a, b) == row[b]


def test_unsupported_tokenizers_are_refused_with_the_reason():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = _train_small()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(T.CanonicalUnsupported, match="pre-tokenizer"):
        T.build_tables(tok, Vocabulary.from_tokenizer(_train_small()))
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    with pytest.raises(T.CanonicalUnsupported, match="not BPE"):
        T.build_tables(wp, Vocabulary.from_tokenizer(wp))



def _verdict(spec: dict) -> str:
    try:
        return f"supported, digits alone: {T._supported(spec)}"
    except T.CanonicalUnsupported as e:
        return str(e)


def test_the_outline_gives_the_full_specs_verdict():
    """`load_tables` refuses from `spec_outline` before serializing the tokenizer: the outline's
    verdict (and reason) is the whole spec's, for supported and refused tokenizers alike."""
    import json

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    whitespace = _train_small()
    whitespace.pre_tokenizer = pre_tokenizers.Whitespace()
    metaspace = _train_small()
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace()
    normalized = _train_small()
    normalized.normalizer = normalizers.NFC()
    spm = Tokenizer(models.BPE({"<unk>": 0, "a": 1, "\u2581": 2}, [], unk_token="<unk>", byte_fallback=True))
    spm.normalizer = normalizers.Replace(" ", "\u2581")
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tokenizers = [load_tokenizer("default").tokenizer, _train_small(), whitespace, metaspace, normalized, spm, wp]
    verdicts = [_verdict(T.spec_outline(t)) for t in tokenizers]
    assert verdicts == [_verdict(json.loads(t.to_str())) for t in tokenizers]
    assert verdicts[0].startswith("supported") and verdicts[1].startswith("supported")
    assert sum(v.startswith("supported") for v in verdicts) == 2  # the others are refused, each for its reason


def test_refused_tokenizers_are_refused_before_serializing(monkeypatch):
    from tokenizers import Tokenizer, models

    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    serialized = []
    monkeypatch.setattr(T, "tables_path", lambda *a, **k: serialized.append(a) or 1 / 0)
    with pytest.raises(T.CanonicalUnsupported, match="not BPE"):
        T.load_tables(wp, Vocabulary.from_tokenizer(wp))
    assert serialized == []


# ---------------------------------------------------------------------------------- in the matcher


def _healed(comp, tok, text: str, canonical: C.CanonicalState = C.OFF):
    """Token healing as the engine does it, with the canonical state after the ids kept."""
    from mask_store import healing
    from mask_store.matcher import GrammarMatcher

    ids = tok.encode(text)
    h = healing.back_off(tok.vocab.token_bytes, text.encode(), ids)
    if canonical.active:
        canonical = comp.canonical.state_after(h.kept, canonical)
    data = text.encode()
    prefix = data[: len(data) - len(h.healed)]
    return GrammarMatcher.from_prefix(comp, prefix, heal=h.healed, canonical=canonical), h.kept


def test_matcher_ands_the_row_and_falls_back_to_the_grammar_when_nothing_is_left(compiled_full):
    """After a lone space, every token spelling a healed `q...` merges with it: the step takes the
    grammar's mask and counts it; where some token is left, the mask is the AND."""
    from mask_store.matcher import GrammarMatcher

    comp, tok = compiled_full
    space = C.CanonicalState(tok.vocab.by_bytes[b" "], C.Continuation.FREE)
    outcomes = {}
    for c in (b"q", b"x"):
        grammar = GrammarMatcher.from_prefix(comp, b"a = ", heal=c).next_token_mask()
        m = GrammarMatcher.from_prefix(comp, b"a = ", heal=c, canonical=space)
        mask = m.next_token_mask()
        fell_back = m.counts.canonical_fallbacks  # the matcher's own count, not the shared grammar's
        row = comp.canonical.allowed_after(space)
        if (grammar & row).any():
            assert np.array_equal(mask, grammar & row) and not fell_back
        else:
            assert np.array_equal(mask, grammar) and fell_back == 1
        outcomes[c] = fell_back
    assert outcomes == {b"q": 1, b"x": 0}


def test_healed_first_tokens_and_what_follows_are_canonical(compiled_full):
    comp, tok = compiled_full
    by = tok.vocab.by_bytes
    text = "def f(x):\n    "
    ids = tok.encode(text)
    m, kept = _healed(comp, tok, text, C.START)
    plain, _ = _healed(comp, tok, text)
    assert tok.vocab.token_bytes[ids[-1]] == b"\n    " and kept == ids[:-1]  # the indentation was backed off
    mask = m.next_token_mask()
    assert mask[by[b"\n   "]] and mask[by[b"\n    "]]
    assert m.accept_token(by[b"\n    "]) and plain.accept_token(by[b"\n    "])
    # the whole indentation then `return` is not how the tokenizer spells it (`\n   ` + ` return`)
    assert plain.next_token_mask()[by[b"return"]] and not m.next_token_mask()[by[b"return"]]
    m.rollback(1)
    assert m.canonical.last == kept[-1] and np.array_equal(m.next_token_mask(), mask)
    f = m.fork()
    assert f.accept_token(by[b"\n   "]) and f.canonical.last == by[b"\n   "] and m.canonical.last == kept[-1]
    assert f.next_token_mask()[by[b" return"]]


def test_a_space_ending_the_indentation_may_only_be_followed_by_what_it_does_not_merge_with(compiled_full):
    """`\\n   ` + ` ` is canonical before `á` (` á` is not a token): the prompt `x = [\\n    á`
    keeps it; before a healed `ret` nothing canonical is left after it, so while healing ` ret`
    the space is not offered (else that step and the next would fall back to the grammar's
    mask); taken anyway (the plain pair rows allow it), the next step falls back, counted.
    Before a digit the run ends whole (SmolLM2 cuts every digit alone first: `\\n    ` + `0`),
    so there the space is not canonical."""
    comp, tok = compiled_full
    by = tok.vocab.by_bytes
    text = "x = [\n    á"
    m, kept = _healed(comp, tok, text, C.START)
    assert [tok.vocab.token_bytes[i] for i in kept[-2:]] == [b"\n   ", b" "] and m.heal == "á".encode()
    assert m.canonical.continuation is C.Continuation.ENDS_WHITESPACE_RUN
    before = m.counts.canonical_fallbacks
    assert m.next_token_mask()[by["á".encode()]] and m.counts.canonical_fallbacks == before
    assert not comp.canonical.allowed_after(m.canonical)[by[b"0"]]

    ids = tok.encode("x = [\n    0")
    assert [tok.vocab.token_bytes[i] for i in ids[-2:]] == [b"\n    ", b"0"]
    assert comp.canonical.is_canonical(ids, whole_text=True)
    spaced = ids[:-2] + [by[b"\n   "], by[b" "], by[b"0"]]  # GPT-2's regex alone would cut it so
    assert not comp.canonical.is_canonical(spaced, whole_text=True)

    text = "def f(x):\n    ret"
    m, kept = _healed(comp, tok, text, C.START)
    assert m.heal == b" ret" and tok.vocab.token_bytes[kept[-1]] == b"\n   "
    mask = m.next_token_mask()
    assert not mask[by[b" "]] and mask[by[b" ret"]] and mask[by[b" return"]]
    assert comp.canonical.allowed_after(m.canonical)[by[b" "]] and m.accept_token(by[b" "])
    assert m.canonical.continuation is C.Continuation.ENDS_WHITESPACE_RUN
    mask = m.next_token_mask()
    assert m.counts.canonical_fallbacks == before + 1 and mask[by[b"ret"]]


# ---------------------------------------------------------------------------------- in the engine


def _replay(pairs: C.CanonicalPairs, kept: list[int], generated: list[int]) -> int:
    """Steps of `generated` (after the prompt's ids kept) that the canonical rows do not allow."""
    state, bad = pairs.state_after(kept), 0
    for t in generated:
        bad += not pairs.allowed_after(state)[t]
        state = pairs.after(state, t)
    return bad


@pytest.mark.slow
def test_engine_generates_canonical_sequences_with_a_real_forward_pass(tiny_model_dir):
    """A random-weight model writes whatever its logits say: with canonical tokenization on
    (the default; speculation and token healing on too) every generated token is allowed by the
    rows after the prompt's kept ids, apart from the counted fallbacks."""
    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.decoding.prompt import build_prompt
    from lsp_server.options import EngineOptions

    engine = CompletionEngine.load(EngineOptions(model=str(tiny_model_dir), max_tokens=24))
    assert engine.options.canonical and engine.options.speculative and engine.compiled.canonical is not None
    pairs = engine.compiled.canonical
    docs = ["import os\n\ndef f(path):\n    return os.pa", "x = [1, 2,\n     3]\nfor i in x:\n    ", "s = 'it'\nt = s.",
            "# a comment about ", "msg = 'the quick brown", 'def g():\n    """Return the ']
    for k, doc in enumerate(docs):
        line, ch = doc.count("\n"), len(doc) - doc.rfind("\n") - 1
        prompt = build_prompt(engine.tokenizer, doc, "", engine.options.context_tokens, None, heal=True,
                              heal_pretoken=True)
        r = engine.complete(CompletionRequest.at(doc, line, ch, document=f"d{k}"))
        assert r.figures.canonical and len(r.token_ids) == 24
        assert _replay(pairs, prompt.ids, r.token_ids) <= r.figures.canonical_fallbacks
    off = engine.options.updated(canonical=False)
    r = engine.complete(CompletionRequest.at(docs[0], 3, 17, document="off"), options=off)
    assert not r.figures.canonical and r.figures.canonical_fallbacks == 0


def test_a_model_that_spells_against_its_tokenizer_is_stopped_unless_turned_off(compiled_full):
    """A scripted model that always takes the longest token writes `\n ` + `b` where the
    tokenizer spells `\n` + ` b`: `canonical=False` (the option, `--no-canonical`) lets it
    through; on, `3` is never the token after `\n ` (the pair rows do not look ahead: having
    taken `\n `, this model finds nothing of its script left, as a real model trained on the
    tokenizer's output rarely would). (Before a digit, `\n ` + `3` is the tokenizer's own
    spelling: SmolLM2 cuts every digit alone first.)"""
    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.options import EngineOptions
    from scripted_model import ScriptedRuntime

    comp, tok = compiled_full
    doc = "def f(x):\n    return x\n\ny = f(\nz = 2\n"
    before = doc[: doc.index("\nz")]
    spelled = {}
    for canonical in (True, False):
        runtime = ScriptedRuntime(tok, (before + "1, [2,\n b])\nz = 2\n").encode(), own_tokens=False)
        engine = CompletionEngine(EngineOptions(canonical=canonical, speculative=False), runtime, comp)
        r = engine.complete(CompletionRequest.at(doc, 3, 6))
        assert r.figures.canonical == canonical
        spelled[canonical] = [tok.vocab.token_bytes[t] for t in r.token_ids]
        if not canonical:
            assert r.text == "1, [2,\n b])"
    pairs = list(zip(spelled[False], spelled[False][1:]))
    assert (b"\n ", b"b") in pairs
    assert (b"\n ", b"b") not in list(zip(spelled[True], spelled[True][1:])) and b"\n " in spelled[True]


# ---------------------------------------------------------------------------------- turning it off


def test_on_by_default_and_turned_off_by_the_setting_and_the_cli_flag():
    import argparse

    from lsp_server.cli_complete import _options, add_complete_parser
    from lsp_server.options import EngineOptions
    from lsp_server.server.settings import ServerOptions

    assert EngineOptions().canonical is True
    opts, problems = ServerOptions().merged({"syntaxlock": {"canonical": False}})
    assert problems == [] and opts.engine.canonical is False
    again, problems = opts.merged({"canonical": "no"})  # not a boolean: refused, the previous value kept
    assert again.engine.canonical is False and len(problems) == 1 and "syntaxlock.canonical" in problems[0]
    assert again.merged({"canonical": None})[0].engine.canonical is True  # null: back to the default
    ap = argparse.ArgumentParser()
    add_complete_parser(ap.add_subparsers())
    assert _options(ap.parse_args(["complete", "f.py"])).canonical is True
    assert _options(ap.parse_args(["complete", "f.py", "--no-canonical"])).canonical is False


def test_a_grammar_without_canonical_pairs_completes_without_them(compiled_full):
    """A tokenizer whose canonical pairs are unknown (CanonicalUnsupported at load: the pairs are
    None) serves plain constrained completions with the option on, and says so in the result."""
    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.options import EngineOptions
    from mask_store.compiled import CompiledGrammar
    from scripted_model import ScriptedRuntime

    comp, tok = compiled_full
    without = CompiledGrammar(comp.store, comp.vocab, comp.recognizer, comp.lexer, canonical=None)
    doc = "def f(x):\n    return x\n\ny = f(\n"
    runtime = ScriptedRuntime(tok, (doc[:-1] + "1)\n").encode())
    engine = CompletionEngine(EngineOptions(speculative=False), runtime, without)
    r = engine.complete(CompletionRequest.at(doc, 3, 6))
    assert engine.options.canonical and not r.figures.canonical and r.figures.canonical_fallbacks == 0
    assert r.text == "1)"


# ---------------------------------------------------------------------------------- the prompt's end


def test_healing_backs_off_the_whole_last_pretoken():
    from mask_store.healing import last_pretoken_tokens

    tok = load_tokenizer("default")
    cases = {"x = f(a\n\n        ": 2, "y = x.retu": 2, "os.pa": 1, "x = [\n    á": 2, "x = [\n    0": 1, "a = b  ": 1, "x": 1,
             "t = '\u4e2d\u6587": 2, "y" * 3000 + " " * 1500: 1}
    for text, n in cases.items():
        ids = tok.encode(text)
        assert last_pretoken_tokens(tok.vocab.token_bytes, tok.tokenizer.pre_tokenizer, text, ids) == n, text
        if n > 1:  # they spell one pre-token, which the tokenizer cut in several tokens
            tail = b"".join(tok.vocab.token_bytes[i] for i in ids[-n:]).decode()
            assert len(tok.tokenizer.pre_tokenizer.pre_tokenize_str(tail)) == 1
    assert last_pretoken_tokens(tok.vocab.token_bytes, None, "abc", tok.encode("abc")) == 1


def test_a_prompt_ending_in_a_blank_line_and_indentation_continues_canonically(compiled_full):
    """`...\n\n        ` ends the prompt as `\n` `\n        `; the document goes on with a
    comment, which the tokenizer spells `\n\n       ` ` #`. Backing off only the last token
    kept the `\n` before it, after which nothing canonical exists (each step fell back to the
    grammar, and a real model wrote CJK text there, taking ` \xe5` after a run that had to
    end); with the whole last pre-token backed off, the model spells it its own way."""
    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.decoding.prompt import build_prompt
    from lsp_server.options import EngineOptions
    from scripted_model import ScriptedRuntime

    comp, tok = compiled_full
    before = "class A:\n    def f(self):\n        x = self.annotation\n\n        "
    tb = tok.vocab.token_bytes
    assert [tb[i] for i in tok.encode(before)[-2:]] == [b"\n", b"\n        "]
    results = {}
    for canonical in (True, False):
        runtime = ScriptedRuntime(tok, (before + "# noqa\n        return x\n").encode())
        engine = CompletionEngine(EngineOptions(canonical=canonical, speculative=False), runtime, comp)
        r = engine.complete(CompletionRequest.at(before, 4, 8))
        prompt = build_prompt(tok, before, "", engine.options.context_tokens, None, heal=True, heal_pretoken=canonical)
        results[canonical] = r
        assert r.text.startswith("# noqa"), r.text
        assert r.figures.tokens_healed == (2 if canonical else 1)
        if canonical:
            assert r.figures.canonical_fallbacks == 0 and _replay(comp.canonical, prompt.ids, r.token_ids) == 0
            assert [tb[i] for i in r.token_ids[:2]] == [b"\n\n       ", b" #"]


def test_healing_offers_no_token_after_which_the_healed_rest_cannot_be_spelled_canonically(compiled_full):
    """A token spelling part of the healed bytes must leave a rest that some token may follow
    canonically: `\\n\\n   ` (then five spaces no token spells after a whitespace run) and `un`
    (then `declar`, merged across by every token) are dropped; the tokenizer's own spellings of
    the healed bytes before each continuation stay allowed."""
    from lsp_server.decoding.prompt import build_prompt
    from mask_store.matcher import GrammarMatcher

    comp, tok = compiled_full
    tb, by = tok.vocab.token_bytes, tok.vocab.by_bytes
    cases = {"class A:\n    def f(self):\n        x = 1\n\n        ": (b"\n\n   ", ["# c\n", "return x\n", "y = 2\n"]),
             "import jinja2\nv = meta.undeclar": (b"un", ["ed_variables(ast)\n", "ed\n", "ation = 1\n"])}
    for before, (dead, continuations) in cases.items():
        prompt = build_prompt(tok, before, "", 1024, None, heal=True, heal_pretoken=True)
        state = comp.canonical.state_after(prompt.ids)
        data = before.encode()
        m = GrammarMatcher.from_prefix(comp, data[: len(data) - len(prompt.healed)], heal=prompt.healed,
                                       canonical=state)
        mask = m.next_token_mask()
        assert m.counts.canonical_fallbacks == 0 and m.counts.canonical_masks == 1
        assert prompt.healed.lstrip(b" ").startswith(dead) and not mask[by[dead]], before
        plain = GrammarMatcher.from_prefix(comp, data[: len(data) - len(prompt.healed)], heal=prompt.healed)
        assert plain.next_token_mask()[by[dead]]  # the grammar and the healed bytes allow it
        for c in continuations:
            own = tok.encode(before + c)[len(prompt.ids)]
            assert mask[own], (before, c, tb[own])
