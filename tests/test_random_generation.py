"""Random-model generation: masked samples from a tiny random-weight model always compile.

A tiny random Llama (with the real SmolLM2 tokenizer) samples constrained completions at
temperature 1 from random stdlib prefixes, each until the matcher says the text may end;
CPython's `compile()` must accept prefix + completion for >= 99% of at least 100 completions,
and every failure is listed (each is a grammar or mask bug).

A random model rarely closes what it opens, so after 48 tokens it draws uniformly from the
allowed tokens of a small closing vocabulary (brackets, quotes, colons, commas, whitespace,
newlines, ` pass`, ` 0`, ` in`, ` x`) -- still under the mask -- until the text may end;
samples that don't end within 200 tokens are counted apart, not as failures. Prefixes that end
inside a string or comment are skipped (the random text would only grow the literal).
"""

from __future__ import annotations

import random
import re

import pytest
import torch
from corpus_support import read_source, stdlib_files

from grammar_tools.parsing.cpython_check import refusal
from mask_store.matcher import GrammarMatcher

N_WANTED = 100
MAX_ATTEMPTS = 240
MAX_TOKENS = 200
FREE_TOKENS = 48
CLOSERS = re.compile(rb"[)\]}'\"\n :\t,]+| pass| 0| in| x")
LITERALS = {"STRING", "LONG_STRING", "FSTRING", "LONG_FSTRING", "TSTRING", "LONG_TSTRING", "BYTES", "LONG_BYTES",
            "COMMENT"}



@pytest.mark.slow
def test_random_model_completions_compile(compiled_full, tiny_model_dir):
    from transformers import LlamaForCausalLM

    compiled, tok = compiled_full
    model = LlamaForCausalLM.from_pretrained(tiny_model_dir).eval()
    closers = torch.tensor([bool(CLOSERS.fullmatch(b)) for b in compiled.tokens[: compiled.V]])
    eos = torch.tensor(sorted(compiled.vocab.eos))
    files = [p for p in stdlib_files(include_tests=False) if p.stat().st_size > 3000]
    rng = random.Random(2024)
    gen = torch.Generator().manual_seed(7)
    ok, failures, unfinished, attempts = 0, [], 0, 0
    grammar = compiled.recognizer.grammar
    while ok + len(failures) < N_WANTED and attempts < MAX_ATTEMPTS:
        attempts += 1
        data = read_source(rng.choice(files))
        if data is None:
            continue
        text = data.decode()
        prefix = text[: rng.randrange(len(text) // 4, len(text))]
        m = GrammarMatcher.from_prefix(compiled, prefix)
        if set(grammar.names(compiled.lexer.possible[m.prefix_state.lexer_state])) & LITERALS:
            continue
        ids = tok.encode(prefix)[-48:]
        out: list[int] = []
        past, inp = None, torch.tensor([ids])
        with torch.inference_mode():
            for step in range(MAX_TOKENS):
                if out and m.is_complete():
                    break
                r = model(inp, past_key_values=past, use_cache=True)
                past = r.past_key_values
                allowed = torch.from_numpy(m.next_token_mask())
                allowed[eos] = False
                if step >= FREE_TOKENS and (allowed & closers).any():
                    probs = (allowed & closers).float()
                else:
                    probs = torch.softmax(r.logits[0, -1].masked_fill(~allowed, float("-inf")), -1)
                t = int(torch.multinomial(probs, 1, generator=gen))
                assert m.accept_token(t), "a token from the mask was rejected"
                out.append(t)
                inp = torch.tensor([[t]])
            else:
                unfinished += 1
                continue
        completion = b"".join(compiled.tokens[t] for t in out).decode("utf-8", "replace")
        err = refusal(prefix + completion)
        if err is None:
            ok += 1
        else:
            failures.append(f"{err}: ...{prefix[-60:]!r} + {completion!r}")
    total = ok + len(failures)
    print(f"random-model generation: {ok}/{total} compile, {unfinished} unfinished, {attempts} prefixes drawn")
    for f in failures:
        print("  failure:", f)
    assert total >= N_WANTED, f"only {total} completions ended ({unfinished} did not)"
    assert ok / total >= 0.99, "\n".join(failures)
