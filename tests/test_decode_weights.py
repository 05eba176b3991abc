"""Half-precision weights for decoding steps: the same products within float16 rounding for few
rows, the float32 weights untouched for many, every Linear of a model swapped, ties kept. (The
kernels that compute them: tests/test_kernels.py.)"""

from __future__ import annotations

import torch

from lsp_server.model.kernels.half_weights import SmallBatchLinear, use_half_weights_for_decoding


def test_few_rows_read_the_half_copy_and_many_rows_the_float32_weight():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 96, bias=True)
    small = SmallBatchLinear(lin, max_half_rows=4)
    with torch.no_grad():
        few = torch.randn(1, 3, 64)
        ref = lin(few)
        got = small(few)
        assert got.dtype == torch.float32 and got.shape == ref.shape
        assert not torch.equal(got, ref)  # rounded through float16...
        assert torch.allclose(got, ref, rtol=1e-2, atol=1e-2)  # ...by no more than that
        many = torch.randn(2, 3, 64)  # 6 rows > 4: the float32 weight, bit for bit
        assert torch.equal(small(many), lin(many))


def test_a_tiny_model_keeps_its_greedy_choices(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    half = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    n_linear = sum(type(m) is torch.nn.Linear for m in half.modules())
    assert use_half_weights_for_decoding(half) == n_linear > 0
    assert not any(type(m) is torch.nn.Linear for m in half.modules())
    if half.config.tie_word_embeddings:
        assert half.lm_head.weight is half.model.embed_tokens.weight
    ids = torch.randint(0, ref.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        a = ref(ids).logits[0]  # 40 rows: the float32 path in both
        b = half(ids).logits[0]
        assert torch.equal(a, b)
        # one token at a time (decoding steps): the float16 copies, same argmax
        past = half(ids[:, :20], use_cache=True).past_key_values
        for j in range(20, 40):
            out = half(ids[:, j : j + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            step = out.logits[0, -1]
            assert torch.allclose(step, a[j], rtol=1e-2, atol=2e-2)
            assert int(step.argmax()) == int(a[j].argmax())


def test_other_dtypes_are_left_alone():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8).to(torch.bfloat16), torch.nn.Linear(8, 8))
    assert use_half_weights_for_decoding(model) == 1
    assert type(model[0]) is torch.nn.Linear and isinstance(model[1], SmallBatchLinear)
