"""The grammar on a team server (lsp_server/team): the parse state sent over the wire gives the
very matcher the local engine builds (the same masks for the same prefix and tokens), the
server's stop policy ends answers where the local one would, and the batch applies every
row's mask with one packed bitmask, other requests' rows untouched."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from grammar_tools.parsing.incremental import PrefixParser
from grammar_tools.parsing.incremental import parse_prefix
from lsp_server.decoding.stopping.rest_of_file import LineScanner, RestOfFile, Start
from lsp_server.team.batch import GrammarBatch
from lsp_server.team.rows import TeamGrammar, TeamRow
from lsp_server.team.wire import TeamArgs, TeamArgsError, decode_nodes, encode_nodes
from mask_store import canonical as canonical_tokenization
from mask_store.matcher import GrammarMatcher

# (text before the cursor, text after it, a continuation the model might write)
CASES = [
    ("import os\n\ndef f(path):\n    return os.pa", "\n", "th.join(path, 'x')\n"),
    ("class A:\n    def g(self, xs):\n        total = [x * 2 for x in xs if x", "\n", " > 0]\n        return total\n"),
    ("def h(name):\n    print(f\"hello {na", "\n", "me}!\")\n"),
    ("values = {\n    'a': (1,\n", "", "          2),\n}\n"),
    ("if True:\n    x = 1\n", "", "    y = x + 1\n"),
    ("async def main():\n    await ", "\n", "asyncio.sleep(1)\n"),
]


@pytest.fixture(scope="module")
def grammar(compiled):
    return TeamGrammar(compiled[0])


def _args(compiled, before: str, after: str, heal: bytes = b"", canonical=canonical_tokenization.OFF, replay=(),
          avoid=frozenset()) -> tuple[TeamArgs, GrammarMatcher]:
    data = before.encode()
    cut = data[: len(data) - len(heal)]
    parser = PrefixParser(compiled.recognizer, compiled.lexer)
    st = parse_prefix(parser, cut)
    held = cut[st.lexeme_start :]
    depth = st.configs[0].depth if st.configs else 0
    scanner = LineScanner(compiled.lexer)
    rest = RestOfFile.build(before, after, "auto", scanner, held, heal, depth, parser, cut)
    args = TeamArgs.build(st, held, heal, canonical, compiled.recognizer.python_version, rest, depth,
                          Start.CURSOR_LINE, replay, avoid, compiled.lexer.hash, compiled.vocab.hash)
    local = GrammarMatcher.from_prefix(compiled, cut, heal=heal, canonical=canonical)
    return args, local


def _tokens(tok, text: str) -> list[int]:
    return list(tok.encode(text))


@pytest.mark.parametrize("before,after,more", CASES)
def test_wire_round_trip_gives_the_local_matchers_masks(compiled, grammar, before, after, more):
    comp, tok = compiled
    args, local = _args(comp, before, after)
    sent = TeamArgs.from_json(args.to_json())
    assert sent.held == args.held and sent.lexer_state == args.lexer_state and sent.ctx == args.ctx
    row = TeamRow(grammar, sent)
    outputs: list[int] = []
    for t in _tokens(tok, more):
        mask = row.step(outputs)
        if mask is None:  # the server's policy ended the answer (a line end)
            break
        assert np.array_equal(mask, local.next_token_mask())
        assert mask[t], "the continuation is valid Python: each of its tokens is allowed"
        assert local.accept_token(t)
        outputs.append(t)
    else:
        row.step(outputs)  # takes the last token
    assert row.matcher.n_accepted == local.n_accepted


def test_healing_and_canonical_state_travel(compiled, grammar):
    comp, tok = compiled
    before = "import os\nos.pa"
    ids = _tokens(tok, before)
    heal = comp.tokens[ids[-1]]
    state = comp.canonical.state_after(ids[:-1], canonical_tokenization.START)
    args, local = _args(comp, before, "\n", heal=heal, canonical=state)
    row = TeamRow(grammar, TeamArgs.from_json(args.to_json()))
    mask = row.step([])
    assert np.array_equal(mask, local.next_token_mask())
    assert mask[ids[-1]] and mask.sum() < comp.V // 10  # healing: tokens that spell `pa` again


def test_the_node_table_shares_parents_and_rebuilds_the_stacks(compiled):
    comp, _ = compiled
    parser = PrefixParser(comp.recognizer, comp.lexer)
    st = parse_prefix(parser, b"x = (1 if y else 2) +")
    table, tops = encode_nodes(st.configs)
    again = decode_nodes(json.loads(json.dumps(table)), tops)
    assert [n.key() for n in again] == [n.key() for n in st.configs]
    assert len(table) == len({id(n) for c in st.configs for n in _chain(c)})


def _chain(node):
    while node is not None:
        yield node
        node = node.parent


def test_a_single_line_answer_ends_at_its_line_end(compiled, grammar):
    comp, tok = compiled
    args, _ = _args(comp, "def f(a):\n    return a +", "\n")
    row = TeamRow(grammar, args)
    outputs = []
    for t in _tokens(tok, " 1\n    x = 2\n"):
        if row.step(outputs) is None:
            break
        outputs.append(t)
    assert row.ended == "line-end"
    assert bytes(row.generated).startswith(b" 1\n")


def test_replay_and_avoid(compiled, grammar):
    comp, tok = compiled
    first = _tokens(tok, " os")[0]
    args, _ = _args(comp, "import os\nx =", "\n", replay=(first,), avoid=frozenset({first}))
    row = TeamRow(grammar, args)
    assert row.matcher.n_accepted == 1 and bytes(row.generated) == comp.tokens[first]
    mask = row.step([])
    assert mask is not None and not mask[first]  # banned at the first decided step
    again = row.step([_tokens(tok, ".")[0]])
    assert again is not None and row.avoid == set()


def test_arguments_for_another_tokenizer_are_refused(compiled, grammar):
    comp, _ = compiled
    args, _ = _args(comp, "x = 1\n", "")
    wrong = TeamArgs.from_json(args.to_json().replace(comp.vocab.hash, "0" * len(comp.vocab.hash)))
    with pytest.raises(TeamArgsError, match="tokenizer"):
        TeamRow(grammar, wrong)
    with pytest.raises(TeamArgsError, match="malformed"):
        TeamArgs.from_json(json.dumps({"v": 1}))


def test_a_stack_the_table_cannot_make_is_refused(compiled, grammar):
    """State numbers from another table (or made up) end the request with a clear error; the
    batch goes on (a feeding function would fail on them: KeyError in the table)."""
    comp, _ = compiled
    args, _ = _args(comp, "def f(x):\n    return [x +", "\n")
    sent = json.loads(args.to_json())
    top = sent["tops"][0]
    successors = comp.recognizer.successors
    parent = sent["nodes"][sent["nodes"][top][1]][0]
    sent["nodes"][top][0] = next(s for s in range(len(successors)) if s not in successors[parent])
    wrong = TeamArgs.from_json(json.dumps(sent))
    with pytest.raises(TeamArgsError, match="stack"):
        TeamRow(grammar, wrong)
    batch = GrammarBatch(grammar, comp.V, max_rows=1)
    assert batch.add(0, {"syntaxlock": json.dumps(sent)}, [])
    logits = torch.zeros(1, comp.V)
    batch.apply(logits)
    assert torch.isfinite(logits[0]).sum() == 1  # the end token alone: the answer ends


def test_the_batch_masks_its_rows_with_one_bitmask(compiled, grammar):
    comp, tok = compiled
    V = comp.V
    batch = GrammarBatch(grammar, V + 64, max_rows=4)  # logits wider than the vocabulary, as vLLM pads them
    a, local_a = _args(comp, "import os\nos.", "\n")
    b, local_b = _args(comp, "def f(x):\n    return x +", "\n")
    outs_a, outs_b = [], []
    assert batch.add(0, {"syntaxlock": a.to_json()}, outs_a)
    assert not batch.add(1, {"other": "x"}, [])
    assert batch.add(2, {"syntaxlock": b.to_json()}, outs_b)
    logits = torch.randn(3, V + 64)
    before = logits.clone()
    batch.apply(logits)
    assert torch.equal(logits[1], before[1])  # not ours: untouched
    for row, local in ((0, local_a), (2, local_b)):
        allowed = torch.isfinite(logits[row]).numpy()
        assert np.array_equal(allowed[:V], local.next_token_mask())
        assert not allowed[V:].any()
    # the next step: the sampled tokens are taken from the requests' output lists
    t = _tokens(tok, "path")[0]
    outs_a.append(t)
    assert local_a.accept_token(t)
    batch.move(2, 1, swap=False)
    logits = torch.randn(2, V + 64)
    batch.apply(logits)
    assert np.array_equal(torch.isfinite(logits[0]).numpy()[:V], local_a.next_token_mask())
    assert np.array_equal(torch.isfinite(logits[1]).numpy()[:V], local_b.next_token_mask())
    # a line end ends row 1's single-line answer: only the end token after it
    for t in _tokens(tok, " 1\n"):
        outs_b.append(t)
    logits = torch.zeros(2, V + 64)
    batch.apply(logits)
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == [grammar.end_token]
    batch.remove(0)
    batch.remove(1)
    assert not batch.rows


def test_bad_arguments_end_the_answer_without_failing_the_batch(compiled, grammar):
    batch = GrammarBatch(grammar, grammar.V, max_rows=2)
    assert batch.add(0, {"syntaxlock": "{not json"}, [])
    logits = torch.zeros(1, grammar.V)
    batch.apply(logits)
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [grammar.end_token]
