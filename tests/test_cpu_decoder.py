"""The hand-written CPU forward pass (`cpu_decoder`) on Hugging Face directories: the same
logits, bit for bit, as transformers' model classes with our float16 weights and kernels for every kind of pass
(a long prompt on an empty cache, a long chunk after a past, short passes on an empty cache and
after a past, the few rows of a verification), for a tiny Llama and a tiny Qwen2 (q/k/v
biases); close to transformers' float32 model; a pass continued from the cache equals the whole
recomputed; a cancelled pass leaves the cache as it was; the weights stay views of the file;
and models it doesn't compute are refused with a reason. Bits are compared with a float32 KV
cache; the default float16 cache is compared with it (`test_a_float16_cache_...`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lsp_server.model.architectures import spec_from_config
from lsp_server.model.cpu_decoder import CpuDecoder, Unsupported, load_cpu_decoder
from lsp_server.model.kv_cache import ForwardCancelled, rewind
from lsp_server.model.memory_parts import _is_mapped

ROOT = Path(__file__).resolve().parents[1]
# (tokens fed, logits kept) per pass, in order over one cache: every branch of the forward
CHUNKS = [(50, 0), (40, 0), (1, 1), (8, 0), (20, 3), (1, 1)]
SHORT_FIRST = [(20, 0), (45, 0), (3, 0)]


def _reference(wdir: Path, kernels):
    """transformers' classes with our float16 weights, row attention and fused layers."""
    from lsp_server.model.half_model import load_half_model
    from lsp_server.model.kernels.fused_layers import use_fused_layers
    from lsp_server.model.kernels.fused_layers import use_row_attention

    model = load_half_model(wdir, kernels)
    use_row_attention(model)
    use_fused_layers(model)
    return model


def _run(model, ids: torch.Tensor, chunks, past) -> list[torch.Tensor]:
    out, at = [], 0
    with torch.inference_mode():
        for n, keep in chunks:
            r = model(ids[:, at : at + n], cache=past, use_cache=True, logits_to_keep=keep)
            out.append(r.logits[0].float())
            past = r.cache
            at += n
    return out


def _compare_with_transformers(wdir: Path, kernels, vocab: int, fused_reference: bool = True) -> None:
    """Every pass's logits are transformers' bits; where the reference's layers are not our
    fused kernel (`fused_reference` False: transformers' classes fuse only plain Llama layers),
    the short passes after a past, which ours computes in C, are within float32 rounding of
    its PyTorch operations (C's expf against PyTorch's SiLU: a few ulps)."""
    from lsp_server.model.hf_cache import GrowingCache

    ours = load_cpu_decoder(wdir, kernels, torch.float32)
    ref = _reference(wdir, kernels)
    ids = torch.randint(0, vocab, (1, 130), generator=torch.Generator().manual_seed(3))
    for chunks in (CHUNKS, SHORT_FIRST):
        a = _run(ours, ids, chunks, ours.new_cache())
        b = _run(ref, ids, chunks, GrowingCache())
        past = 0
        for n, x, y in zip(chunks, a, b):
            assert x.shape == y.shape, n
            if fused_reference or n[0] > 32 or past == 0:
                assert torch.equal(x, y), (n, (x - y).abs().max())
            else:
                assert torch.allclose(x, y, rtol=1e-5, atol=1e-6) and not torch.equal(x, y), (n, (x - y).abs().max())
            past += n[0]


def test_the_tiny_llama_gives_transformers_bits(tiny_model_dir, model_kernels):
    _compare_with_transformers(tiny_model_dir, model_kernels, 49152)


def _tiny_qwen2(path: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if (path / "model.safetensors").is_file():
        return path
    torch.manual_seed(4)
    cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                      max_position_embeddings=4096)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # biases that matter (they start at zero)
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0, 0.5)
    model.save_pretrained(path, safe_serialization=True)
    return path


def test_a_tiny_qwen2_with_biases_gives_transformers_bits(tmp_path, model_kernels):
    wdir = _tiny_qwen2(tmp_path / "qwen2")
    model = load_cpu_decoder(wdir, model_kernels)
    assert all(layer.b0 is not None for layer in model.layers) and model.stack is not None  # biases in the fused kernel
    _compare_with_transformers(wdir, model_kernels, 512, fused_reference=False)


def test_close_to_transformers_float32_model(tiny_model_dir, model_kernels):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    ours = load_cpu_decoder(tiny_model_dir, model_kernels)
    ids = torch.randint(0, 49152, (1, 60), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        a = ref(ids).logits[0]
        b = ours(ids, logits_to_keep=0).logits[0]
    assert torch.allclose(a, b, rtol=1e-2, atol=2e-2)
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_continuing_from_the_cache_equals_recomputing(tiny_model_dir, model_kernels):
    model = load_cpu_decoder(tiny_model_dir, model_kernels)
    ids = torch.randint(0, 49152, (1, 90), generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        whole = model(ids, logits_to_keep=0).logits[0]
        past = model(ids[:, :70], logits_to_keep=1).cache
        for j in range(70, 90):  # decoding steps over the cache
            step = model(ids[:, j : j + 1], cache=past).logits[0, -1]
            assert torch.allclose(step, whole[j], rtol=1e-4, atol=1e-4)
            assert int(step.argmax()) == int(whole[j].argmax())
        assert past.get_seq_length() == 90
        rewind(past, 80)  # a rejected draft's positions dropped: the same again
        again = model(ids[:, 80:], cache=past, logits_to_keep=0).logits[0]
        assert torch.allclose(again, whole[80:], rtol=1e-4, atol=1e-4)


def test_a_float16_cache_stays_within_its_rounding_of_a_float32_one(tiny_model_dir, model_kernels):
    """The default cache holds float16 keys and values (half the bytes). Rounding them (relative
    error <= 2^-11) moves the tiny model's logits (magnitude ~1.5) by ~1e-4 in every kind of pass;
    the bound, 1e-3, is 20 times tighter than the float16 weights' own difference from the float32
    model (2e-2 in `test_close_to_transformers_float32_model`), and the greedy tokens agree."""
    from lsp_server.model.kv_cache import cache_bytes

    half = load_cpu_decoder(tiny_model_dir, model_kernels)
    wide = load_cpu_decoder(tiny_model_dir, model_kernels, torch.float32)
    ids = torch.randint(0, 49152, (1, 130), generator=torch.Generator().manual_seed(3))
    for chunks in (CHUNKS, SHORT_FIRST):
        cache = half.new_cache()
        a = _run(half, ids, chunks, cache)
        b = _run(wide, ids, chunks, wide.new_cache())
        for n, x, y in zip(chunks, a, b):
            assert torch.allclose(x, y, rtol=0, atol=1e-3), (n, (x - y).abs().max())
            assert torch.equal(x.argmax(-1), y.argmax(-1)), n
        assert cache.k.dtype == torch.float16
    with torch.inference_mode():
        held = [cache_bytes(m(ids[:, :90]).cache) for m in (half, wide)]
    assert 2 * held[0] == held[1] > 0


@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.float32], ids=["f16", "f32"])
def test_a_short_pass_runs_every_layer_in_one_call_with_the_bits_of_single_steps(tiny_model_dir, model_kernels,
                                                                                  monkeypatch, kv_dtype):
    """After a past, a pass of a few rows is one `decoder_layers` call (no call per layer), and a
    verification pass of 8 rows gives the bits of 8 single steps over either cache."""
    model = load_cpu_decoder(tiny_model_dir, model_kernels, kv_dtype)
    calls = []
    for name in ("decoder_layers", "decoder_layer"):
        real = getattr(model_kernels, name)
        monkeypatch.setattr(model_kernels, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k))
    ids = torch.randint(0, 49152, (1, 60), generator=torch.Generator().manual_seed(8))
    with torch.inference_mode():
        past = model(ids[:, :50]).cache
        calls.clear()
        together = model(ids[:, 50:58], cache=past, logits_to_keep=0).logits[0]
        assert calls == ["decoder_layers"]
        rewind(past, 50)
        for j in range(50, 58):
            step = model(ids[:, j : j + 1], cache=past).logits[0, -1]
            assert torch.equal(step, together[j - 50]), j
    assert calls == ["decoder_layers"] * 9


def test_a_cancelled_pass_leaves_the_cache_as_it_was(tiny_model_dir, model_kernels):
    model = load_cpu_decoder(tiny_model_dir, model_kernels)
    assert len(model.layers) == 2
    ids = torch.randint(0, 49152, (1, 100), generator=torch.Generator().manual_seed(7))
    calls = iter([False, True])  # stopped before the second layer
    with torch.inference_mode():
        past = model(ids[:, :60]).cache
        with pytest.raises(ForwardCancelled):
            model(ids[:, 60:], cache=past, cancel=lambda: next(calls))
        assert past.get_seq_length() == 60
        got = model(ids[:, 60:], cache=past).logits[0, -1]
        want = model(ids[:, 60:], cache=model(ids[:, :60]).cache).logits[0, -1]  # never cancelled
    assert torch.equal(got, want)


@pytest.mark.parametrize("tied_as", ["model.embed_tokens.weight", "lm_head.weight"])
def test_the_weights_are_views_of_the_float16_file(tmp_path, tiny_model_dir, model_kernels, tied_as):
    """Tied weights are saved once: as the embedding (save_pretrained) or as the head (the GGUF
    conversion)."""
    from safetensors.torch import load_file, save_file

    wdir = tmp_path / "half"
    wdir.mkdir()
    tensors = load_file(str(tiny_model_dir / "model.safetensors"))
    tensors[tied_as] = tensors.pop("model.embed_tokens.weight")
    save_file({k: v.to(torch.float16) if v.dim() == 2 else v for k, v in tensors.items()},
              str(wdir / "model.safetensors"))
    shutil.copy(tiny_model_dir / "config.json", wdir / "config.json")
    model = load_cpu_decoder(wdir, model_kernels)
    matrices = [model.embed] + [getattr(layer, f"w{i}") for layer in model.layers for i in range(7)]
    assert all(t.dtype == torch.float16 and _is_mapped(t) for t in matrices)
    assert model.lm_head is model.embed  # tied: one tensor
    assert all(layer.attn_norm.dtype == torch.float32 for layer in model.layers)


@pytest.mark.parametrize("change, why", [
    ({"model_type": "gpt2"}, "model type"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}}, "rotary"),
    ({"hidden_act": "gelu"}, "activation"),
    ({"hidden_size": 60, "num_attention_heads": 4}, "dimensions"),
])
def test_models_it_does_not_compute_are_refused_with_a_reason(tmp_path, tiny_model_dir, change, why):
    cfg = json.loads((tiny_model_dir / "config.json").read_text()) | change
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(Unsupported, match=why):
        spec_from_config(tmp_path)


def test_the_cpu_runtime_never_imports_transformers_model_classes(tiny_model_dir, model_kernels):
    script = (
        "import sys\n"
        "from lsp_server.model.runtime import load_model\n"
        f"rt = load_model({str(tiny_model_dir)!r}, 'cpu')\n"
        "logits, past = rt.forward(list(range(100, 150)))\n"
        "logits, past = rt.forward([7], past)\n"
        "print(type(rt.model).__name__, logits.shape[0], past.get_seq_length(),\n"
        "      sorted(m for m in sys.modules if m.startswith(('transformers.models', 'transformers.modeling'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [CpuDecoder.__name__, "1", "51", "[]"], out.stdout


@pytest.mark.parametrize("rotary", ["HALVES", "PAIRS"])
def test_the_kept_rotary_tables_give_each_pass_the_bits_of_its_own_angles(rotary):
    from lsp_server.model.architectures import Rotary
    from lsp_server.model.rotary import BLOCK, KEPT, RotaryTables, angles

    d = 64
    exponents = torch.arange(0, d, 2, dtype=torch.float) / d
    inv_freq = torch.stack([1.0 / (theta ** exponents) for theta in (10_000.0, 1_000_000.0)])  # two tables, as Gemma 3
    kind = Rotary[rotary]
    tables = RotaryTables(inv_freq, 0.5, kind)
    passes = [(1, 0), (1, BLOCK - 1), (3, BLOCK - 2), (8, 5 * BLOCK - 4), (1, 9 * BLOCK + 7),
              (KEPT * BLOCK, 3), (130, 0), (1, 40 * BLOCK)]
    for rows, past in passes + passes[::-1]:  # computed, then kept (or recomputed once forgotten)
        cos, sin = tables.of(rows, past)
        want_cos, want_sin = angles(inv_freq, 0.5, kind, past, past + rows)
        assert cos.shape == (2, rows, d) and cos.is_contiguous() and sin.is_contiguous()
        assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin), (rows, past)
