"""One float16 copy of the weights (`half_weights`, `half_model`): every row count is multiplied
by it, within float16 rounding of the float32 product and with a row's bits independent of the
rows beside it; a loaded model keeps no float32 matrix, keeps its ties and its greedy choices,
and views a float16 file's pages instead of copying them. (The kernels that compute the
products: tests/test_kernels.py.)"""

from __future__ import annotations

from pathlib import Path

import torch

from lsp_server.model.half_model import load_half_model
from lsp_server.model.memory_parts import model_bytes
from lsp_server.model.kernels.half_weights import HalfEmbedding, HalfLinear, use_half_weights


def test_every_row_count_reads_the_one_half_copy(model_kernels):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 96, bias=True)
    half = HalfLinear(lin.weight.to(torch.float16), lin.bias, model_kernels)
    assert half.weight.dtype == torch.float16 and half.bias.dtype == torch.float32
    with torch.no_grad():
        many = torch.randn(2, 40, 64)  # 80 rows: a prompt goes through the same copy
        ref = lin(many)
        got = half(many)
        assert got.dtype == torch.float32 and got.shape == ref.shape
        assert not torch.equal(got, ref)  # rounded through float16...
        assert torch.allclose(got, ref, rtol=1e-2, atol=1e-2)  # ...by no more than that
        for i in (0, 17, 39):  # a row alone gets the bits it gets among 80
            assert torch.equal(half(many[1, i : i + 1]), got[1, i : i + 1])


def test_a_tiny_model_keeps_no_float32_matrix_and_its_greedy_choices(tiny_model_dir, model_kernels):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    half = load_half_model(tiny_model_dir, model_kernels)
    assert not any(type(m) in (torch.nn.Linear, torch.nn.Embedding) for m in half.modules())
    assert all(p.dtype == torch.float16 for p in half.parameters() if p.dim() >= 2)
    assert all(p.dtype == torch.float32 for p in half.parameters() if p.dim() < 2)  # norms
    if half.config.tie_word_embeddings:
        assert half.lm_head.weight is half.model.embed_tokens.weight
    matrices = sum(p.numel() for p in ref.parameters() if p.dim() >= 2)
    assert model_bytes(half)["float16"] == 2 * matrices  # one copy, tied weights once
    ids = torch.randint(0, ref.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        a = ref(ids).logits[0]
        b = half(ids).logits[0]
        assert b.dtype == torch.float32
        assert torch.allclose(a, b, rtol=1e-2, atol=2e-2)
        assert torch.equal(a.argmax(-1), b.argmax(-1))
        past = half(ids[:, :20], use_cache=True).past_key_values
        for j in range(20, 40):  # one token at a time (decoding steps): the same copy
            out = half(ids[:, j : j + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            step = out.logits[0, -1]
            assert torch.allclose(step, a[j], rtol=1e-2, atol=2e-2)
            assert int(step.argmax()) == int(a[j].argmax())


def _mapped_files(address: int) -> list[str]:
    """The files mapped at `address` in this process (/proc/self/maps)."""
    out = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= address < hi and len(parts) >= 6:
            out.append(parts[5])
    return out


def test_a_float16_file_is_viewed_not_copied(tiny_model_dir, tmp_path, model_kernels):
    """The converted GGUF's layout (float16 matrices, float32 vectors): the model's matrices are
    the file's pages, memory-mapped; its norms are the file's float32 values."""
    import shutil

    from safetensors.torch import load_file, save_file

    state = load_file(str(tiny_model_dir / "model.safetensors"))
    save_file({k: v.to(torch.float16) if v.dim() >= 2 else v for k, v in state.items()},
              str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(tiny_model_dir / "config.json", tmp_path / "config.json")
    model = load_half_model(tmp_path, model_kernels)
    weight = model.model.layers[0].mlp.up_proj.weight
    assert weight.dtype == torch.float16
    assert str(tmp_path / "model.safetensors") in _mapped_files(weight.data_ptr())
    norm = model.model.layers[0].input_layernorm.weight
    assert norm.dtype == torch.float32
    assert torch.equal(norm, state["model.layers.0.input_layernorm.weight"])


def test_matrices_the_kernel_cannot_multiply_stay_float32(model_kernels):
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.Linear(8, 8), torch.nn.Embedding(10, 8))
    assert use_half_weights(model, model_kernels) == 2
    assert type(model[0]) is torch.nn.Linear and model[0].weight.dtype == torch.float32  # 12 % 8 != 0
    assert isinstance(model[1], HalfLinear) and model[1].weight.dtype == torch.float16
    assert isinstance(model[2], HalfEmbedding)
    with torch.no_grad():
        assert model[2](torch.tensor([3])).dtype == torch.float32
