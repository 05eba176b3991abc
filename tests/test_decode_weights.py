"""Half-precision weights for decoding steps: the same products within float16 rounding for few
rows, the float32 weights untouched for many, every Linear of a model swapped, ties kept."""

from __future__ import annotations

import pytest
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


@pytest.mark.parametrize("wide", [False, True], ids=["avx2", "avx512"])
def test_the_kernel_gives_each_row_the_same_bits_whatever_the_number_of_rows(wide):
    from lsp_server.model.kernels import library as decode_kernels

    kernel = kernels_of(wide)
    if kernel is None:  # no AVX2/F16C or no compiler: the model keeps PyTorch's product
        assert not decode_kernels.cpu_supported() or decode_kernels._compiler() is None
        return
    assert kernel.isa == ("avx512" if wide else "avx2")
    torch.manual_seed(0)
    # outputs not a multiple of the tiles too; K a multiple of 16 (the wide path) or only of 8
    for n, k in [(96, 64), (37, 24), (5, 8), (41, 48)]:
        w = (torch.randn(n, k) * 0.1).half()
        x = torch.randn(11, k)
        y = kernel.half_matmul(x, w)
        ref = x.double() @ w.double().t()
        assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5)
        for m in range(1, 11):  # every row group size and remainder of the tiling
            assert torch.equal(kernel.half_matmul(x[:m], w), y[:m])
            assert torch.equal(kernel.half_matmul(x[m : m + 1], w)[0], y[m])


def test_a_model_steps_and_verification_passes_agree_bit_for_bit(tiny_model_dir):
    """Feeding n tokens at once (a speculative verification) gives the logits that n single
    steps give: with the kernel the products do not depend on the number of rows."""
    from transformers import AutoModelForCausalLM

    from lsp_server.model.kernels import library as decode_kernels
    from lsp_server.model.kv_cache import GrowingCache

    if decode_kernels.load() is None:
        return
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    reference = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    use_half_weights_for_decoding(model)
    assert decode_kernels.use_row_attention(model)
    ids = torch.randint(0, model.config.vocab_size, (1, 60), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        past = model(ids[:, :50], past_key_values=GrowingCache(), use_cache=True).past_key_values
        together = model(ids[:, 50:58], past_key_values=past, use_cache=True).logits[0]
        past.crop(-8)
        for j in range(50, 58):
            step = model(ids[:, j : j + 1], past_key_values=past, use_cache=True).logits[0, -1]
            assert torch.equal(step, together[j - 50]), j
        # and the float32 model with PyTorch's attention agrees within float16 weight rounding
        ref = reference(ids[:, :58]).logits[0, 50:58]
        assert torch.allclose(together, ref, rtol=1e-2, atol=2e-2)
        assert torch.equal(together.argmax(-1), ref.argmax(-1))


def kernels_of(wide: bool):
    """The AVX2 or the AVX-512 build of the kernels (skipped where the CPU lacks AVX-512F)."""
    from lsp_server.model.kernels import library as decode_kernels

    if wide and "avx512f" not in decode_kernels.cpu_flags():
        pytest.skip("this CPU has no AVX-512F")
    return decode_kernels.load(wide)


@pytest.mark.parametrize("wide", [False, True], ids=["avx2", "avx512"])
@pytest.mark.parametrize("d", [16, 24, 40])  # head sizes a multiple of 8, not always of 16
def test_row_attention_matches_causal_sdpa_and_ignores_the_number_of_rows(d, wide):
    kernels = kernels_of(wide)
    if kernels is None:
        return
    torch.manual_seed(3)
    h, h_kv, length = 6, 2, 70
    cap = torch.randn(1, h_kv, 128, d)  # a GrowingCache-like buffer: rows contiguous, heads spaced
    key, value = cap[:, :, :length], torch.randn(1, h_kv, 128, d)[:, :, :length]
    query = torch.randn(1, h, 9, d) * 3
    out = kernels.row_attention(query, key, value, d ** -0.5)  # [1, 9, h, d]
    rk = key.repeat_interleave(h // h_kv, 1)
    rv = value.repeat_interleave(h // h_kv, 1)
    for i in range(9):  # query row i is position length - 9 + i and sees keys up to it
        seen = length - 9 + i + 1
        ref = torch.nn.functional.scaled_dot_product_attention(query[:, :, i : i + 1], rk[:, :, :seen], rv[:, :, :seen])
        assert torch.allclose(out[0, i], ref[0, :, 0], rtol=1e-4, atol=1e-5)
        alone = kernels.row_attention(query[:, :, i : i + 1], key[:, :, :seen], value[:, :, :seen], d ** -0.5)
        assert torch.equal(alone[0, 0], out[0, i])
    for q_len in (2, 4, 5, 7):  # rows are taken in groups whose sizes depend on the count
        last = kernels.row_attention(query[:, :, 9 - q_len :], key, value, d ** -0.5)
        assert torch.equal(last[0], out[0, 9 - q_len :])


def _small_llama(**overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(4)
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      **overrides)  # grouped-query attention, as SmolLM2
    return LlamaForCausalLM(cfg).eval()


def test_fused_layers_compute_the_layer_and_ignore_the_number_of_rows():
    from lsp_server.model.kernels import library as decode_kernels
    from lsp_server.model.kernels.fused_layers import use_fused_layers
    from lsp_server.model.kv_cache import GrowingCache

    if decode_kernels.load() is None:
        return
    reference = _small_llama()
    model = _small_llama()
    use_half_weights_for_decoding(model)
    assert use_fused_layers(model) == 3
    ids = torch.randint(0, 512, (1, 90), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        want = reference(ids).logits[0]
        past = model(ids[:, :80], past_key_values=GrowingCache(), use_cache=True).past_key_values
        together = model(ids[:, 80:90], past_key_values=past, use_cache=True).logits[0]
        assert torch.allclose(together, want[80:90], rtol=1e-2, atol=2e-2)  # float16 weights
        assert torch.equal(together.argmax(-1), want[80:90].argmax(-1))
        past.crop(-10)
        for j in range(80, 90):  # one row at a time: the same bits as the ten-row pass
            step = model(ids[:, j : j + 1], past_key_values=past, use_cache=True).logits[0, -1]
            assert torch.equal(step, together[j - 80]), j
        assert past.get_seq_length() == 90


def test_layers_the_kernel_does_not_compute_keep_their_own_forward():
    from lsp_server.model.kernels.fused_layers import use_fused_layers

    assert use_fused_layers(_small_llama(attention_bias=True)) == 0  # biases: not plain Llama
    model = _small_llama()
    assert use_fused_layers(model) == 0  # float32 weights without decode_weights' copies
