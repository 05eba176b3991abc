"""The C kernels of decoding steps (`lsp_server/model/kernels`): each row gets the same bits
whatever the number of rows, the products and layers match PyTorch's within float16 rounding,
every call is checked at the boundary (a clear error, nothing read or written out of bounds),
and all of this passes again with the kernels built with AddressSanitizer (the tests of this
file and of test_block_formats.py run in a subprocess with the ASan runtime preloaded; a
deliberate overflow past the checks shows that the sanitizer is live). Every test that takes
the `kernels` fixture runs against each build this machine can run (avx512, avx2, portable).
Where the kernels can't be built or loaded here, the tests that need them are skipped with the
reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lsp_server.model.kernels import build, library
from lsp_server.model.kernels.boundary import KernelArgumentError
from lsp_server.model.kernels.half_weights import use_half_weights

from kernel_support import SANITIZED, SANITIZED_ENV, kernels_of


@pytest.fixture(params=list(build.ISAS))
def kernels(request) -> library.DecodeKernels:
    """Each build of the kernels this machine runs, in turn."""
    return kernels_of(request.param)


def test_without_kernels_the_tests_that_need_them_skip(monkeypatch, tmp_path):
    """No compiler: `load` gives None, and a kernel test is skipped with the reason, not
    passed; a build the CPU can't run is refused with the instructions it lacks."""
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path))  # nothing built or loaded there yet
    monkeypatch.setattr(build, "_compiler", lambda: None)
    assert build.load("portable") is None
    assert "no C compiler" in build.unavailable("portable")
    with pytest.raises(pytest.skip.Exception, match="no C compiler"):
        kernels_of("portable")
    monkeypatch.setattr(build, "cpu_flags", lambda: frozenset({"neon"}))  # an ARM laptop
    assert build.runnable_isas() == ("portable",) and build.chosen_isa() == "portable"
    assert "lacks AVX2/F16C/FMA" in build.unavailable("avx2")
    assert "lacks AVX2/AVX512F/F16C/FMA" in build.unavailable("avx512")


def test_the_build_is_chosen_by_the_cpu_or_forced(monkeypatch):
    """`SYNTAXLOCK_KERNELS` forces a build, `SYNTAXLOCK_NO_AVX512=1` means avx2, else the widest
    the CPU runs; a forced name that is no build is refused with the reason."""
    monkeypatch.delenv("SYNTAXLOCK_KERNELS", raising=False)
    monkeypatch.delenv("SYNTAXLOCK_NO_AVX512", raising=False)
    assert build.chosen_isa() == build.runnable_isas()[0]
    monkeypatch.setenv("SYNTAXLOCK_KERNELS", "portable")
    assert build.chosen_isa() == "portable"
    forced = build.load()
    assert forced is None or (forced.isa == "portable" and forced is build.load("portable"))
    monkeypatch.setenv("SYNTAXLOCK_KERNELS", "neon")
    assert build.load() is None and "is not a build" in build.unavailable()
    monkeypatch.delenv("SYNTAXLOCK_KERNELS")
    monkeypatch.setenv("SYNTAXLOCK_NO_AVX512", "1")
    assert build.chosen_isa() == ("avx2" if "avx2" in build.runnable_isas() else "portable")


def test_the_kernel_gives_each_row_the_same_bits_whatever_the_number_of_rows(kernels):
    torch.manual_seed(0)
    # outputs not a multiple of the tiles too; K a multiple of 16 (the wide path) or only of 8
    for n, k in [(96, 64), (37, 24), (5, 8), (41, 48)]:
        w = (torch.randn(n, k) * 0.1).half()
        x = torch.randn(11, k)
        y = kernels.half_matmul(x, w)
        ref = x.double() @ w.double().t()
        assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5)
        for m in range(1, 11):  # every row group size and remainder of the tiling
            assert torch.equal(kernels.half_matmul(x[:m], w), y[:m])
            assert torch.equal(kernels.half_matmul(x[m : m + 1], w)[0], y[m])


def test_the_builds_are_the_ones_asked_for(kernels):
    assert kernels.isa in build.ISAS
    assert kernels is build.load(kernels.isa)


def test_a_model_steps_and_verification_passes_agree_bit_for_bit(tiny_model_dir, model_kernels):
    """Feeding n tokens at once (a speculative verification) gives the logits that n single
    steps give: with the kernel the products do not depend on the number of rows."""
    from transformers import AutoModelForCausalLM

    from lsp_server.model.hf_cache import GrowingCache
    from lsp_server.model.kernels.fused_layers import use_row_attention

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    reference = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    use_half_weights(model, model_kernels)
    assert use_row_attention(model)
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


@pytest.mark.parametrize("d", [16, 24, 40])  # head sizes a multiple of 8, not always of 16
@pytest.mark.parametrize("h, h_kv", [(6, 2), (14, 2), (4, 1)])  # a single row's heads alone, or in parts of 3-4
@pytest.mark.parametrize("length", [70, 300])  # several rows read the keys in blocks of 4096 floats: 300 are 2-3 of them
def test_row_attention_matches_causal_sdpa_and_ignores_the_number_of_rows(d, h, h_kv, length, kernels):
    torch.manual_seed(3)
    cap = torch.randn(1, h_kv, 320, d)  # a GrowingCache-like buffer: rows contiguous, heads spaced
    key, value = cap[:, :, :length], torch.randn(1, h_kv, 320, d)[:, :, :length]
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


@pytest.mark.parametrize("d", [16, 40])
def test_row_attention_reads_a_float16_cache_as_its_exact_float32_values(d, kernels):
    """A float16 cache is converted exactly when read: the same bits as the float32 tensors of
    its values, for every number of rows."""
    torch.manual_seed(7)
    key = (torch.randn(1, 2, 384, d) * 4).half()[:, :, :300]  # heads spaced, as a cache buffer; blocks of keys
    value = torch.randn(1, 2, 384, d).half()[:, :, :300]
    query = torch.randn(1, 6, 9, d) * 3
    wide = kernels.row_attention(query, key.float(), value.float(), d ** -0.5)
    for q_len in (1, 2, 4, 5, 9):
        out = kernels.row_attention(query[:, :, 9 - q_len :], key, value, d ** -0.5)
        assert torch.equal(out[0], wide[0, 9 - q_len :]), q_len


def _small_llama(**overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(4)
    shape = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    cfg = LlamaConfig(**{**shape, **overrides})  # grouped-query attention, as SmolLM2
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("shape", [{}, {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}],
                         ids=["head16", "head64"])  # the kernel ropes heads of a multiple of 32 within the products
def test_fused_layers_compute_the_layer_and_ignore_the_number_of_rows(model_kernels, shape):
    from lsp_server.model.kernels.fused_layers import use_fused_layers
    from lsp_server.model.hf_cache import GrowingCache

    reference = _small_llama(**shape)
    model = _small_llama(**shape)
    use_half_weights(model, model_kernels)
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
    assert use_fused_layers(model) == 0  # float32 weights, not half_weights' float16 ones


def _stack_of(kernels, n_layers: int, **change):
    """`n_layers` small layers' `LayerWeights` (different weights each) and their stack."""
    layers = []
    for i in range(n_layers):
        constant, _ = _layer(**change)
        torch.manual_seed(10 + i)
        constant["weights"] = [(torch.randn_like(w.float()) * 0.1).half() for w in constant["weights"]]
        constant["in_norm"] = 1 + 0.1 * torch.randn(constant["in_norm"].shape)
        layers.append(kernels.layer_weights(**constant))
    return layers, kernels.layer_stack(layers)


def _filled_cache(n_layers: int, past: int, dtype, kv_heads=2, d=8):
    from lsp_server.model.kv_cache import CpuCache

    cache = CpuCache(n_layers, dtype, kv_heads, d)
    torch.manual_seed(9)
    with cache.write(past) as (_, k, v):
        for i in range(n_layers):
            k[i, :, :past], v[i, :, :past] = torch.randn(kv_heads, past, d), torch.randn(kv_heads, past, d)
    return cache


def _layers_in_one_call(kernels, h, stack, cos, sin, cache) -> None:
    """`decoder_layers` for the rows of `h` after the positions `cache` (a `CpuCache`) holds."""
    with cache.write(h.shape[1]) as (past, keys, values):
        kernels.decoder_layers(h, stack, cos, sin, keys, values, past)


def _layer_by_layer(kernels, h, layers, cos, sin, cache) -> None:
    """`decoder_layer` for each layer in turn, over the layer's slice of `cache`."""
    with cache.write(h.shape[1]) as (past, keys, values):
        for i, layer in enumerate(layers):
            kernels.decoder_layer(h, layer, cos, sin, keys[i : i + 1], values[i : i + 1], past)


@pytest.mark.parametrize("d", [8, 32])  # 32: the products rope the heads themselves
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
def test_decoder_layers_in_one_call_give_the_bits_of_one_call_per_layer(kernels, dtype, d):
    """`decoder_layers` (every layer of a pass in one call and one parallel region) computes what
    `decoder_layer` computes layer by layer: the same rows, the same cache, for both element
    types of the cache; and a row alone gets the bits it gets among others."""
    layers, stack = _stack_of(kernels, 3, d=d)
    _, call = _layer(q_len=3, past=5, d=d)
    cos, sin = torch.randn(1, 3, d), torch.randn(1, 3, d)
    one = _filled_cache(3, 5, dtype, d=d)
    each = _filled_cache(3, 5, dtype, d=d)
    h1, h2 = call["h"].clone(), call["h"].clone()
    _layers_in_one_call(kernels, h1, stack, cos, sin, one)
    _layer_by_layer(kernels, h2, layers, cos, sin, each)
    assert torch.equal(h1, h2) and not torch.equal(h1, call["h"])
    assert one.k.dtype == dtype and one.get_seq_length() == each.get_seq_length() == 8
    assert torch.equal(one.k[:, :, :8], each.k[:, :, :8]) and torch.equal(one.v[:, :, :8], each.v[:, :, :8])
    rows = _filled_cache(3, 5, dtype, d=d)
    for i in range(3):  # the same rows one at a time
        h = call["h"][:, i : i + 1].clone()
        _layers_in_one_call(kernels, h, stack, cos[:, i : i + 1].contiguous(), sin[:, i : i + 1].contiguous(), rows)
        assert torch.equal(h[0, 0], h1[0, i]), i


def test_a_layer_rounds_the_positions_it_writes_as_pytorch_does(kernels):
    """The kernel's float16 cache writes round to nearest even like PyTorch's conversion (the
    long passes' writer), so a position holds the same bits whoever wrote it; the layer's output
    stays within the rounding's reach of a float32 cache's."""
    _, call = _layer(q_len=2, past=5)
    constant, _ = _layer()
    layer = kernels.layer_weights(**constant)
    wide = SimpleNamespace(_k=torch.randn(1, 2, 8, 8), _v=torch.randn(1, 2, 8, 8))
    wide._k[:, :, :5], wide._v[:, :, :5] = wide._k[:, :, :5].half().float(), wide._v[:, :, :5].half().float()
    half = SimpleNamespace(_k=wide._k.half(), _v=wide._v.half())
    h_wide, h_half = call["h"].clone(), call["h"].clone()
    kernels.decoder_layer(h_wide, layer, call["cos"], call["sin"], wide._k, wide._v, 5)
    kernels.decoder_layer(h_half, layer, call["cos"], call["sin"], half._k, half._v, 5)
    assert torch.equal(half._k[:, :, 5:7], wide._k[:, :, 5:7].half())
    assert torch.equal(half._v[:, :, 5:7], wide._v[:, :, 5:7].half())
    assert torch.allclose(h_half, h_wide, rtol=2e-3, atol=2e-3) and not torch.equal(half._k[:, :, 5:7].float(),
                                                                                  wide._k[:, :, 5:7])


# ---------------------------------------------------------------- the boundary


def _refused(call, argument: str) -> str:
    with pytest.raises(KernelArgumentError) as err:
        call()
    assert err.value.argument == argument, str(err.value)
    return str(err.value)


def test_half_matmul_refuses_what_it_cannot_read(kernels):
    x, w = torch.randn(3, 64), torch.randn(16, 64).half()
    assert "float16" in _refused(lambda: kernels.half_matmul(x, w.float()), "w")
    assert "float32" in _refused(lambda: kernels.half_matmul(x.double(), w), "x")
    assert "[*, 64]" in _refused(lambda: kernels.half_matmul(x, w[:, :56].contiguous().t().contiguous()), "w")
    assert "contiguous" in _refused(lambda: kernels.half_matmul(x, torch.randn(64, 16).half().t()), "w")
    short = w[:, :12].contiguous()
    assert "multiple of 8" in _refused(lambda: kernels.half_matmul(x[:, :12], short), "the reduced dimension")
    assert "tensor" in _refused(lambda: kernels.half_matmul(x, w.numpy()), "w")
    assert "outputs" in _refused(lambda: kernels.half_matmul(x, w[:0]), "outputs")


def test_row_attention_refuses_what_it_cannot_read(kernels):
    q = torch.randn(1, 4, 3, 16)
    key = torch.randn(1, 2, 32, 16)
    value = torch.randn(1, 2, 32, 16)
    assert kernels.row_attention(q, key, value, 0.25).shape == (1, 3, 4, 16)
    _refused(lambda: kernels.row_attention(q, key.transpose(2, 3).contiguous().transpose(2, 3), value, 0.25), "key")
    _refused(lambda: kernels.row_attention(q, key, value[:, :, :20], 0.25), "value")
    _refused(lambda: kernels.row_attention(q, key, value.half(), 0.25), "value")  # one element type
    _refused(lambda: kernels.row_attention(q, key.double(), value.double(), 0.25), "key")
    _refused(lambda: kernels.row_attention(q, key[:, :, :2], value[:, :, :2], 0.25), "key")  # fewer positions than rows
    _refused(lambda: kernels.row_attention(torch.randn(1, 3, 3, 16), key, value, 0.25), "query")  # 3 heads over 2
    k12, v12 = key[..., :12].contiguous(), value[..., :12].contiguous()
    _refused(lambda: kernels.row_attention(q[..., :12], k12, v12, 0.25), "head_dim")
    _refused(lambda: kernels.row_attention(q[0], key, value, 0.25), "query")


def _layer(q_len=2, past=5, cap=8, e=32, heads=4, kv_heads=2, d=8, ffn=40, **change):
    """The arguments of a small layer: (the `layer_weights` arguments, the `decoder_layer` ones
    after the layer's), with `change` applied to either."""
    torch.manual_seed(6)
    half = lambda *shape: (torch.randn(*shape) * 0.1).half()  # noqa: E731
    weights = [half(heads * d, e), half(kv_heads * d, e), half(kv_heads * d, e), half(e, heads * d),
               half(ffn, e), half(ffn, e), half(e, ffn)]
    constant = dict(in_norm=torch.ones(e), post_norm=torch.ones(e), eps=1e-5, weights=weights, heads=heads,
                    kv_heads=kv_heads, head_dim=d, ffn=ffn, scale=d ** -0.5)
    call = dict(h=torch.randn(1, q_len, e), cos=torch.ones(1, q_len, d), sin=torch.zeros(1, q_len, d),
                k_buf=torch.zeros(1, kv_heads, cap, d), v_buf=torch.zeros(1, kv_heads, cap, d), past=past)
    return ({**constant, **{k: v for k, v in change.items() if k in constant}},
            {**call, **{k: v for k, v in change.items() if k in call}})


def test_decoder_layer_refuses_what_it_cannot_read_or_write(kernels):
    constant, call = _layer()
    layer = kernels.layer_weights(**constant)
    before = call["h"].clone()
    kernels.decoder_layer(layer=layer, **call)  # the layer runs: rows updated, the two new positions written
    assert not torch.equal(call["h"], before)
    assert call["k_buf"][0, :, 5:7].abs().sum() > 0 and call["k_buf"][0, :, 7:].abs().sum() == 0
    weights = constant["weights"]
    checked_once = {
        "q projection": dict(weights=[weights[0].float()] + weights[1:]),
        "down projection": dict(weights=weights[:6] + [torch.zeros(32, 48).half()]),
        "weights": dict(weights=weights[:6]),
        "input norm": dict(in_norm=torch.ones(32, 2)),
        "post-attention norm": dict(post_norm=torch.ones(16)),
        "heads": dict(heads=3, weights=_layer(heads=3)[0]["weights"]),
        "head_dim": dict(head_dim=4),
    }
    for argument, change in checked_once.items():
        _refused(lambda change=change: kernels.layer_weights(**_layer(**change)[0]), argument)
    strided = dict(k_buf=torch.zeros(1, 2, 8, 16)[..., :8], v_buf=torch.zeros(1, 2, 8, 16)[..., :8])
    checked_each_call = {
        "key buffer": dict(past=7),  # 7 + 2 positions in a buffer of 8
        "value buffer": dict(v_buf=torch.zeros(1, 2, 6, 8)),
        "cos": dict(cos=torch.ones(1, 3, 8)),
        "sin": dict(sin=torch.zeros(1, 2, 8).double()),
        "hidden states": dict(h=torch.randn(1, 32, 2).transpose(1, 2)),
        "past": dict(past=-1),
    }
    for argument, change in checked_each_call.items():
        _refused(lambda change=change: kernels.decoder_layer(layer=layer, **_layer(**change)[1]), argument)
    _refused(lambda: kernels.decoder_layer(layer=layer, **{**_layer()[1], **strided}), "key buffer")
    _refused(lambda: kernels.decoder_layer(layer=constant, **_layer()[1]), "layer")  # not checked weights
    layer.weights[3].set_(torch.zeros(32, 16).half())  # a projection replaced after the check
    _refused(lambda: kernels.decoder_layer(layer=layer, **_layer()[1]), "layer")


def test_decoder_layers_refuses_what_it_cannot_read_or_write(kernels):
    from lsp_server.model.kernels import boundary

    layers, stack = _stack_of(kernels, 2)
    _, call = _layer(q_len=2, past=5)
    args = dict(h=call["h"].clone(), cos=call["cos"], sin=call["sin"])

    def run(n_layers=2, **change):
        cache = _filled_cache(n_layers, 5, torch.float16)
        cache.make_room(7)
        kernels.decoder_layers(**{"stack": stack, "keys": cache.k, "values": cache.v, "past": 5, **args, **change})

    run()  # it runs
    _refused(lambda: kernels.layer_stack([]), "layers")
    _refused(lambda: kernels.layer_stack([layers[0], _stack_of(kernels, 1, ffn=48)[0][0]]), "layers")  # sizes differ
    _refused(lambda: run(n_layers=3), "keys")  # another number of layers than the stack's
    _refused(lambda: run(cos=torch.ones(1, 3, 8)), "cos")
    _refused(lambda: run(h=torch.randn(1, 2, 16)), "hidden states")
    keys, values = torch.zeros(2, 2, 8, 8).half(), torch.zeros(2, 2, 8, 8).half()
    check = dict(h=args["h"], hidden=32, layers=2, kv_heads=2, head_dim=8, table=0, cos=args["cos"], sin=args["sin"],
                 keys=keys, values=values, past=5, threads=1)
    boundary.check_layers_call(**check)  # what the call above passed
    for argument, change in {
        "cos": dict(table=1),  # a layer reading a second table that the pass does not give
        "values": dict(values=values.float()),  # another element type than the keys
        "keys": dict(keys=keys.double(), values=values.double()),
        "past": dict(past=-1),
    }.items():
        _refused(lambda change=change: boundary.check_layers_call(**{**check, **change}), argument)
    _refused(lambda: boundary.check_layers_call(**{**check, "past": 7}), "keys")  # 7 + 2 in 8 positions
    _refused(lambda: boundary.check_layers_call(**{**check, "keys": torch.zeros(2, 2, 16, 8).half()[:, :, ::2]}),
             "keys")  # not C-ordered
    _refused(lambda: boundary.check_layers_call(**{**check, "values": torch.zeros(2, 2, 9, 8).half()}), "values")
    layers[1].weights[6].set_(torch.zeros(32, 40).half())  # a projection replaced after the check
    _refused(run, "stack")


# ---------------------------------------------------------------- AddressSanitizer


def _asan_runtime() -> str:
    cc = build._compiler()
    if cc is None:
        pytest.skip("no C compiler (gcc or cc) on PATH")
    path = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(path) or not Path(path).exists():
        pytest.skip(f"{cc} has no AddressSanitizer runtime (libasan.so)")
    return path


@pytest.fixture(scope="module")
def sanitized_builds(tmp_path_factory) -> dict[str, str]:
    """Every build this machine runs, compiled once with AddressSanitizer (a minute each)."""
    out_dir = tmp_path_factory.mktemp("asan")
    try:
        return {isa: str(build.build(out_dir, isa=isa, sanitize=True)) for isa in build.runnable_isas()}
    except RuntimeError as e:
        pytest.skip(f"the kernels can't be built with AddressSanitizer: {e}")


def _run_sanitized(args: list[str], env: dict, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, **env, "LD_PRELOAD": _asan_runtime(),
           "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86"}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).resolve().parents[1])


@pytest.mark.slow
def test_the_sanitizer_catches_a_write_out_of_bounds(sanitized_builds):
    """The harness is live: the sanitized half_matmul called directly (past the boundary's
    checks) with an output one row short is stopped as a heap buffer overflow."""
    path = sanitized_builds["portable"]
    script = (
        "import ctypes, torch\n"
        f"f = ctypes.CDLL({path!r}).half_matmul\n"
        "f.restype = None\n"
        "f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4\n"
        "x, w, y = torch.randn(3, 64), torch.randn(16, 64).half(), torch.empty(2, 16)\n"
        "f(x.data_ptr(), w.data_ptr(), y.data_ptr(), 3, 16, 64, 1)\n"
        "print('not caught')\n"
    )
    r = _run_sanitized(["-c", script], {}, timeout=300)
    assert r.returncode == 86, r.stdout + r.stderr[-3000:]
    assert "AddressSanitizer: heap-buffer-overflow" in r.stderr and "not caught" not in r.stdout


@pytest.mark.slow
def test_kernel_tests_pass_under_address_sanitizer(sanitized_builds):
    """Every other test of this file and of test_block_formats.py, with every build this machine
    runs built with AddressSanitizer and its runtime preloaded: no read or write out of bounds,
    and only the builds this CPU can't run skipped."""
    builds = sanitized_builds
    r = _run_sanitized(
        ["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-k", "not sanitizer", __file__,
         str(Path(__file__).with_name("test_block_formats.py"))],
        {SANITIZED_ENV: json.dumps(builds)}, timeout=3000,
    )
    out = r.stdout + r.stderr[-5000:]
    assert "AddressSanitizer" not in out, out
    assert r.returncode == 0, out
    assert "PASSED tests/test_kernels.py::test_the_asan_builds_are_loaded" in r.stdout, out
    if set(builds) == set(build.ISAS):  # every build ran: nothing skipped
        assert "skipped" not in r.stdout.strip().splitlines()[-1], out


def test_the_asan_builds_are_loaded():
    """(Run by the test above, in the sanitized process.)"""
    if not SANITIZED:
        pytest.skip("only under AddressSanitizer (test_kernel_tests_pass_under_address_sanitizer)")
    for isa, kernels in SANITIZED.items():
        assert build.load(isa) is kernels
    assert build.load() in SANITIZED.values()


# ---------------------------------------------------------------- weights in GGUF blocks


def _exact_blocks(fmt, n: int, k: int, seed: int):
    """A random `BlockMatrix` [n, k] of `fmt` whose values float16 holds exactly, and the
    float16 tensor of the same values (`model_support.float16_exact_blocks`)."""
    from model_support import float16_exact_blocks

    return float16_exact_blocks(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.1, fmt)


@pytest.mark.parametrize("fmt", ["Q4_1", "Q8_0"])
def test_long_products_of_block_weights_give_the_bits_of_float16_weights_of_the_same_values(kernels, fmt):
    """A long product (more than `INT8_ROWS` rows: a prompt's) de-quantizes a block matrix
    exactly and multiplies it as it multiplies float16 weights: where float16 holds the values,
    the results are the same bits, row by row and whatever the number of rows. (Short products
    take the int8 path: test_block_formats.py.)"""
    from lsp_server.model.kernels.block_weights import WeightFormat

    for n, k in [(37, 64), (16, 32), (5, 96), (200, 64)]:  # 200: long products' tasks of 64 outputs
        w, same = _exact_blocks(WeightFormat[fmt], n, k, seed=n)
        assert torch.equal(w.dequantize().half(), same) and torch.equal(w.dequantize(), same.float())
        x = torch.randn(80, k, generator=torch.Generator().manual_seed(k))
        y = kernels.matmul(x, w)
        assert torch.equal(y, kernels.half_matmul(x, same))
        for lo, hi in [(0, 33), (5, 79), (40, 80)]:  # other long passes: the same rows' bits
            assert torch.equal(kernels.matmul(x[lo:hi], w), y[lo:hi])


def test_a_layer_with_block_weights_stays_within_int8_rounding_of_the_float16_layer(kernels):
    """`decoder_layer` and `decoder_layers` with projections of several formats (float16, Q4_1,
    Q8_0): the same bits in one call as layer by layer, a row alone the bits it gets among
    others, and within the int8 products' rounding of the layer with float16 weights of the same
    values. (Every format, mixed as a Q4_K_M file mixes them: test_block_formats.py.)"""
    from lsp_server.model.kernels.block_weights import WeightFormat

    formats = [WeightFormat.Q4_1, WeightFormat.Q4_1, WeightFormat.Q8_0, WeightFormat.Q8_0, WeightFormat.Q4_1,
               WeightFormat.F16, WeightFormat.Q4_1]
    stacks = {"blocks": [], "half": []}
    for i in range(2):
        constant, _ = _layer(e=64, d=16, heads=4, kv_heads=2, ffn=96)
        blocks, half = [], []
        for j, (fmt, w) in enumerate(zip(formats, constant["weights"])):
            if fmt is WeightFormat.F16:
                blocks.append(w)
                half.append(w)
            else:
                b, same = _exact_blocks(fmt, *w.shape, seed=10 * i + j)
                blocks.append(b)
                half.append(same)
        stacks["blocks"].append(kernels.layer_weights(**(constant | {"weights": blocks})))
        stacks["half"].append(kernels.layer_weights(**(constant | {"weights": half})))
    _, call = _layer(q_len=3, past=5, e=64, d=16, kv_heads=2)
    cos, sin = torch.randn(1, 3, 16), torch.randn(1, 3, 16)
    out = {}
    for name, layers in stacks.items():
        one, each = _filled_cache(2, 5, torch.float16, d=16), _filled_cache(2, 5, torch.float16, d=16)
        h1, h2 = call["h"].clone(), call["h"].clone()
        _layers_in_one_call(kernels, h1, kernels.layer_stack(layers), cos, sin, one)
        _layer_by_layer(kernels, h2, layers, cos, sin, each)
        assert torch.equal(h1, h2) and torch.equal(one.k[:, :, :8], each.k[:, :, :8])
        out[name] = (h1, one.k[:, :, :8].clone(), one.v[:, :, :8].clone())
    assert not torch.equal(out["blocks"][0], out["half"][0])  # the int8 products: not the float16 bits
    added = (out["half"][0] - call["h"]).norm()  # what the two layers added to the rows
    assert float((out["blocks"][0] - out["half"][0]).norm() / added) < 0.03
    for a, b in zip(out["blocks"][1:], out["half"][1:]):  # the keys and values written
        assert float((a.float() - b.float()).norm() / b.float().norm()) < 0.03
    rows = _filled_cache(2, 5, torch.float16, d=16)
    stack = kernels.layer_stack(stacks["blocks"])
    for i in range(3):
        h = call["h"][:, i : i + 1].clone()
        _layers_in_one_call(kernels, h, stack, cos[:, i : i + 1].contiguous(), sin[:, i : i + 1].contiguous(), rows)
        assert torch.equal(h[0, 0], out["blocks"][0][0, i]), i


def test_block_weights_that_are_not_whole_blocks_are_refused(kernels):
    from lsp_server.model.kernels.block_weights import BlockFormatError, BlockMatrix, WeightFormat

    w, _ = _exact_blocks(WeightFormat.Q4_1, 8, 64, seed=0)
    with pytest.raises(BlockFormatError, match="take 40 bytes"):
        BlockMatrix.of(w.blocks[:, :30].contiguous(), WeightFormat.Q4_1, 64)
    with pytest.raises(BlockFormatError, match="multiple of 32"):
        BlockMatrix.of(w.blocks, WeightFormat.Q4_1, 48)
    with pytest.raises(BlockFormatError, match="uint8"):
        BlockMatrix.of(w.blocks.float(), WeightFormat.Q4_1, 64)
    with pytest.raises(BlockFormatError, match="F16 is not a block format"):
        BlockMatrix.of(w.blocks, WeightFormat.F16, 64)
    with pytest.raises(BlockFormatError, match="storage type Q2_K is not one the kernels read"):
        BlockMatrix.of(w.blocks, "Q2_K", 64)
    assert "rows of 32 values (x's), not 64" in _refused(lambda: kernels.matmul(torch.randn(2, 32), w), "w")
    stale = BlockMatrix(w.blocks[:, :20], WeightFormat.Q4_1, 8, 64)  # made around `of`: still checked
    assert "[8, 40]" in _refused(lambda: kernels.matmul(torch.randn(2, 64), stale), "w blocks")
    constant, _ = _layer(e=64, d=16, ffn=96)
    wrong, _ = _exact_blocks(WeightFormat.Q8_0, 32, 64, seed=1)  # q is [64, 64]
    assert "[64, 64]" in _refused(lambda: kernels.layer_weights(**(constant | {
        "weights": [wrong] + constant["weights"][1:]})), "q projection")
