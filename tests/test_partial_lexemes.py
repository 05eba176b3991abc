"""Prefixes that end mid-token: the held-back lexeme and token healing allow exactly what
CPython accepts. Every allowed probe comes with a completion that CPython compiles; every
rejected probe is a text no completion can save."""

from __future__ import annotations


import pytest

from grammar_tools.parsing.cpython_check import compiles
from mask_store import healing
from mask_store.matcher import GrammarMatcher

# (prefix, heal back-off, token text, allowed, rest that makes a valid file when allowed)
PROBES = [
    ("import os\nx = os.pa", 1, b"path", True, ""),
    ("import os\nx = os.pa", 1, b"pa", True, ""),
    ("import os\nx = os.pa", 1, b"pass", True, "enger"),  # os.pass is no name yet, os.passenger is
    ("import os\nx = os.pa", 1, b"(", False, None),  # healing: `pa` must come back first
    ("def f():\n    ret", 0, b"urn", True, ""),
    ("def f():\n    ret", 0, b"ry", True, ""),
    ("def f():\n    ret", 0, b"(", True, ")"),
    ("def f():\n    ret", 0, b" x", False, None),
    ("def f():\n    ret", 1, b" return", True, ""),  # healed: ` ret` spelled again as ` return`
    ("def f():\n    ret", 1, b" ret", True, "urn 1"),
    ("def f():\n    ret", 1, b" x", False, None),
    ('x = "abc', 0, b'"', True, ""),
    ('x = "abc', 0, b'")', False, None),
    ('x = "abc', 0, b"\n", False, None),  # no newline in a one-line string
    ('x = "abc', 0, b"\\", True, 'n"'),
    ("x = 0x", 0, b"f", True, ""),
    ("x = 0x", 0, b"ff", True, ""),
    ("x = 0x", 0, b"_", True, "1"),
    ("x = 0x", 0, b"g", False, None),
    ("x = 0x", 0, b" ", False, None),
    ("x = 0x", 0, b"\n", False, None),
    ("if x:\n   ", 0, b" pass", True, ""),
    ("if x:\n   ", 0, b"pass", True, ""),
    ("if x:\n   ", 0, b"\n", True, "    pass"),
    ("if x:\n   ", 0, b"#", True, " c\n    pass"),
    ("if x:\n   ", 0, b"else", True, "where = 1"),  # a keyword prefix may still be a name
    ("if x:\n   ", 0, b")", False, None),
    ("if x:\n    pass\n   ", 0, b" ", True, "pass"),  # back to the block's width
    ("if x:\n    pass\n   ", 0, b"pass", False, None),  # width 3: no such block
    ("if x:\n    pass\n", 0, b"else", True, ":\n    pass"),
    ("x = (1,\n  ", 0, b"2", True, ")"),  # inside brackets indentation means nothing
]


def _healed_matcher(compiled, tok, prefix: str, ids: list[int], n: int):
    """Token healing as the engine does it: back off `n` tokens, the matcher must re-create them."""
    h = healing.back_off(tok.vocab.token_bytes, prefix.encode(), ids, n)
    data = prefix.encode()
    return GrammarMatcher.from_prefix(compiled, data[: len(data) - len(h.healed)], heal=h.healed), h.kept


@pytest.mark.parametrize("prefix, back_off, token, allowed, rest", PROBES)
def test_probe(prefix, back_off, token, allowed, rest, compiled_full):
    compiled, tok = compiled_full
    t = tok.vocab.by_bytes[token]
    ids = tok.encode(prefix)
    m, kept = _healed_matcher(compiled, tok, prefix, ids, back_off)
    assert len(kept) == len(ids) - back_off
    mask = m.next_token_mask()
    assert bool(mask[t]) == allowed
    if allowed:
        healed = b"".join(tok.vocab.token_bytes[i] for i in ids[len(kept):])
        text = prefix.encode()[: len(prefix.encode()) - len(healed)] + token + rest.encode()
        assert compiles(text.decode()), text
        assert m.accept_token(t)


def test_healing_allows_only_tokens_that_spell_the_backed_off_text(compiled_full):
    compiled, tok = compiled_full
    prefix = "import os\nx = os.pa"
    ids = tok.encode(prefix)
    m, kept = _healed_matcher(compiled, tok, prefix, ids, 1)
    assert m.heal == b"pa"
    allowed = [tok.vocab.token_bytes[i] for i in m.next_token_mask().nonzero()[0]]
    assert allowed and all(b.startswith(b"pa") or b"pa".startswith(b) for b in allowed)
    assert not m.is_complete()  # the healed text must come back before the end


@pytest.mark.parametrize("text", [b"x = 1, \\\n", b"x = 1, \\\n   ", b"x = 1, \\\n\n", b"x = 1  # c \\\n", b"x = (1, \\\n"])
def test_the_text_may_end_where_cpython_compiles_it_after_a_line_continuation(compiled_full, text):
    """The end (an end token, a stop) is allowed after a backslash-newline exactly where CPython
    compiles the file: not right after it ("unexpected EOF"), but after blanks or a blank line."""
    compiled, _ = compiled_full
    m = GrammarMatcher.from_prefix(compiled, text)
    assert m.is_complete() == compiles(text), text
