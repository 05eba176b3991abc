"""A GGUF file is converted (for transformers' classes: CUDA, or a CPU without our kernels)
once, in a child process (its peak never stays with the server): the converted directory holds
float16 matrices and float32 vectors, gguf's values rounded to float16 (llama's q/k rows in
transformers' order); a file that is not a GGUF model gives a `ConversionError` that says which
file, and leaves no directory behind."""

from __future__ import annotations

import pytest
import torch
from gguf import GGUFReader, dequantize

from lsp_server.model.converted_weights import ConversionError, converted_dir, weights_dir
from lsp_server.model.memory_parts import process_memory
from mask_store.model_files import ModelSource, resolve_model


def test_a_broken_gguf_file_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    src = ModelSource("gguf", bad, "broken")
    with pytest.raises(ConversionError, match="broken.gguf"):
        weights_dir(src)
    out = converted_dir(src)
    assert not out.exists() and not list(out.parent.glob(out.name + "*"))


@pytest.mark.slow
def test_the_default_gguf_converts_in_a_child_process(tmp_path, monkeypatch):
    from safetensors import safe_open

    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path / "cache"))
    src = resolve_model("default")
    before = process_memory()["VmHWM"]
    out = weights_dir(src)
    assert out == converted_dir(src) and (out / "config.json").is_file()
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # nothing written aside is left
    # the de-quantized float32 model (~540 MB) was never in this process
    assert process_memory()["VmHWM"] - before < 100 * 1024
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        dtypes = {f.get_slice(name).get_dtype() for name in f.keys()}
        q_half = f.get_tensor("model.layers.0.self_attn.q_proj.weight")
    assert dtypes == {"F16", "F32"}
    tensors = {t.name: t for t in GGUFReader(str(src.path)).tensors}
    gguf_q = torch.from_numpy(dequantize(tensors["blk.0.attn_q.weight"].data, tensors["blk.0.attn_q.weight"].tensor_type))
    # llama's GGUF rows are stored for rotation of adjacent pairs: row 2i + j of a head is
    # transformers' row j * D/2 + i (SmolLM2: 9 heads of 64)
    order = torch.arange(576).view(9, 32, 2).transpose(1, 2).reshape(-1)
    assert torch.equal(gguf_q[order].half(), q_half)
