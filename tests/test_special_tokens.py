"""Special tokens are text: a document that spells the default tokenizer's control tokens (in
strings and comments) reaches the model and the mask store as those characters, never as the
control tokens; the mask allows no special token but the end of sequence, where the text ends."""

from __future__ import annotations

import numpy as np

from lsp_server.decoding.prompt import build_prompt, lookup_reference
from mask_store.matcher import GrammarMatcher
from mask_store.verify import verify_files


def spelling_file(tok) -> str:
    """A valid file with every special token's text in a string, a comment and a docstring."""
    added = tok.tokenizer.get_added_tokens_decoder()
    texts = [t.content for i, t in sorted(added.items()) if i in tok.vocab.special]
    assert len(texts) >= 10 and "<|endoftext|>" in texts and "<filename>" in texts
    lines = ['"""Markers: ' + " ".join(texts) + '"""', "", "import re", ""]
    for k, text in enumerate(texts):
        lines.append(f"MARK_{k} = {text!r}  # {text}")
        lines.append(f"PATTERN_{k} = re.compile(r'{text}(.*)')")
    lines += ["", "", "def render(name):", f"    return '{texts[0]}' + name + \"{texts[-1]}\"", ""]
    return "\n".join(lines)


def test_document_text_never_becomes_a_control_token(compiled):
    comp, tok = compiled
    text = spelling_file(tok)
    special = set(tok.vocab.special)
    ids = tok.encode(text)
    assert not special & set(ids)
    assert b"".join(tok.vocab.token_bytes[i] for i in ids) == text.encode()  # text, byte for byte
    cut = text.index("def render")
    prompt = build_prompt(tok, text[:cut], text[cut:], 4096, None, heal=True)
    assert not special & set(prompt.ids)
    assert not special & set(lookup_reference(tok, text[:cut], text[cut:], prompt))


def test_the_soundness_walk_reads_special_token_spellings_as_text(compiled, tmp_path):
    comp, tok = compiled
    path = tmp_path / "markers.py"
    path.write_text(spelling_file(tok))
    report = verify_files(comp, tok.encode, [path])
    assert report.files == 1 and report.tokens > 100
    assert report.ok, report.summary()


def test_the_mask_allows_no_special_token_but_the_end_where_the_text_ends(compiled):
    comp, tok = compiled
    text = spelling_file(tok)
    eos = np.array(sorted(tok.vocab.eos))
    others = np.array(sorted(set(tok.vocab.special) - set(tok.vocab.eos)))
    assert others.size > 0
    m = GrammarMatcher.from_prefix(comp, b"")
    ends = 0
    for t in tok.encode(text):
        mask = m.next_token_mask()
        assert not mask[others].any()
        assert mask[eos].all() == m.is_complete() and (mask[eos].any() == m.is_complete())
        ends += m.is_complete()
        assert m.accept_token(t)
    assert m.is_complete() and m.next_token_mask()[eos].all()
    assert ends > 5  # the text could end at every line end between statements
