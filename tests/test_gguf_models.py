"""The model the user brings: GGUF files of each architecture (llama, qwen2, gemma3, starcoder2)
with tensors in every block type the kernels take, read in place and computed by `cpu_decoder`.

Random-weight files written with the `gguf` package (`lsp_server.model.stand_in_gguf`: the
default model's byte-level BPE vocabulary; `tests/test_gguf_tokenizer.py` covers
SentencePiece): each loads, its logits are those of a float64 reference forward of the same file
(`gguf_reference`, written apart from the runtime from llama.cpp's reading of the families),
short passes give single steps' bits, the matrices are views of the file's own mapping, and bad
files are refused at once, naming the file and what is wrong, leaving nothing in the cache.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gguf_reference import ReferenceModel
from grammar_tools.parsing.cpython_check import compiles
from lsp_server.model.cpu_decoder import load_cpu_decoder
from lsp_server.model.kv_cache import rewind
from lsp_server.model.runtime import head_rows
from lsp_server.model.kernels.block_weights import BlockMatrix
from lsp_server.model.stand_in_gguf import ALL_TYPES, SHAPES, cycling_types, write_stand_in

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURES = ("llama", "qwen2", "gemma3", "starcoder2")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """One tiny file per architecture, its matrices taking every block type in turn."""
    out = tmp_path_factory.mktemp("gguf")
    return {a: write_stand_in(out / f"{a}.gguf", SHAPES[f"tiny-{a}"], cycling_types(ALL_TYPES), seed=i)
            for i, a in enumerate(ARCHITECTURES)}


def _file_mappings(path: Path) -> list[tuple[int, int]]:
    """The address ranges this process maps from `path` (/proc/self/maps)."""
    out = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5] == str(path):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi))
    return out


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_gives_the_reference_logits(files, arch, model_kernels):
    """A prompt (a long pass), then steps after it (short passes), against the float64 forward
    of the same file: within the products' rounding (8-bit activations in short passes)."""
    model = load_cpu_decoder(files[arch], model_kernels, torch.float32)
    types = {m.format.name for layer in model.layers for m in layer.matrices if isinstance(m, BlockMatrix)}
    assert types >= {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "BF16"}
    ids = np.random.default_rng(1).integers(0, 49152, 48).tolist()
    want = ReferenceModel(files[arch]).logits(ids)
    with torch.inference_mode():
        prompt = model(torch.tensor([ids]), logits_to_keep=0).logits[0].double().numpy()
        cache = model(torch.tensor([ids[:40]]), logits_to_keep=0).cache
        steps = np.stack([model(torch.tensor([[t]]), cache=cache).logits[0, -1].double().numpy() for t in ids[40:]])
    def error(got, ref):  # relative to the logits' spread around each row's mean
        return np.linalg.norm(got - ref) / np.linalg.norm(ref - ref.mean(-1, keepdims=True))

    # a prompt de-quantizes the legacy blocks exactly and computes them in float32, but quantizes
    # the K-quant products' input rows to 8 bits as a step does (decode_kernels.c, `int8_path`);
    # steps quantize every product's input rows (llama.cpp's way): 0.7-6% here over 2-6 layers of
    # random weights; a wrong rotation, norm or window gives the size of the logits
    assert error(prompt, want) < 0.1, error(prompt, want)
    assert error(steps, want[40:]) < 0.1, error(steps, want[40:])
    assert (prompt.argmax(-1) == want.argmax(-1)).mean() >= 0.75 and (steps.argmax(-1) == want[40:].argmax(-1)).mean() >= 0.75


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_verification_pass_gives_single_steps_bits(files, arch, model_kernels):
    model = load_cpu_decoder(files[arch], model_kernels)
    ids = torch.randint(0, 49152, (1, 60), generator=torch.Generator().manual_seed(8))
    with torch.inference_mode():
        past = model(ids[:, :50]).cache
        together = model(ids[:, 50:58], cache=past, logits_to_keep=0).logits[0]
        rewind(past, 50)
        for j in range(50, 58):
            step = model(ids[:, j : j + 1], cache=past).logits[0, -1]
            assert torch.equal(step, together[j - 50]), j


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_masked_head_computes_the_allowed_tokens_logits_alone(files, arch, model_kernels):
    """A step or a verification pass told which tokens the grammar allows (`head_rows`, where
    few are): their logits are the whole head's bits, every other one -inf (so every choice
    under the mask is the same); where many are allowed the whole head is computed."""
    model = load_cpu_decoder(files[arch], model_kernels)
    rows = model.head_matrix.shape[0]
    allowed = np.zeros(rows - 3, dtype=bool)  # a mask may be shorter than the head (padding rows)
    allowed[np.random.default_rng(9).choice(rows - 3, rows // 20, replace=False)] = True
    wanted = head_rows(allowed, rows)
    assert wanted is not None and int(wanted.sum()) == rows // 20 and not wanted[rows - 3 :].any()
    assert head_rows(np.ones(rows, dtype=bool), rows) is None and head_rows(None, rows) is None
    ids = torch.randint(0, 49152, (1, 44), generator=torch.Generator().manual_seed(10))
    with torch.inference_mode():
        past = model(ids[:, :40]).cache
        for n in (1, 4):  # a step, a verification pass
            whole = model(ids[:, 40 : 40 + n], cache=past, logits_to_keep=n).logits[0]
            rewind(past, 40)
            part = model(ids[:, 40 : 40 + n], cache=past, logits_to_keep=n, head_rows=wanted).logits[0]
            rewind(past, 40)
            assert torch.equal(part[:, wanted], whole[:, wanted]) and torch.isneginf(part[:, ~wanted]).all()
            masked = torch.where(wanted, whole, torch.tensor(float("-inf")))
            assert torch.equal(part.argmax(-1), masked.argmax(-1))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_matrices_are_the_files_own_blocks(files, arch, model_kernels):
    """No converted copy: every matrix's bytes lie in this process's mapping of the file (the
    norms and biases are small float32 copies)."""
    model = load_cpu_decoder(files[arch], model_kernels)
    ranges = _file_mappings(files[arch])
    assert ranges

    def mapped(t: torch.Tensor) -> bool:
        return any(lo <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= hi for lo, hi in ranges)

    assert mapped(model.embed)
    for layer in model.layers:
        for i, m in enumerate(layer.matrices):
            if m is not None:
                assert mapped(m.blocks if isinstance(m, BlockMatrix) else m), (arch, i)


def _write_variant(path: Path, tmp: Path, *, arch: str | None = None, kind: str | None = None,
                   drop: str | None = None, bad_type: str | None = None) -> Path:
    """A copy of the GGUF file `path` with one thing changed (read and rewritten with gguf)."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

    r = GGUFReader(str(path))
    out = tmp / "variant.gguf"
    w = GGUFWriter(str(out), arch or r.fields["general.architecture"].contents())
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), GGUFValueType.ARRAY, sub_type=f.types[-1])
        else:
            w.add_key_value(key, f.contents(), f.types[0])
    if kind:
        w.add_string("general.type", kind)
    for t in r.tensors:
        if t.name == drop:
            continue
        if t.name == bad_type:
            rows = int(t.shape[1])
            raw = np.zeros((rows, int(t.shape[0]) // 256 * 84), dtype=np.uint8)  # Q2_K: 84 bytes a block
            w.add_tensor(t.name, raw, raw_dtype=GGMLQuantizationType.Q2_K)
            continue
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


BAD_FILES = {
    "unknown architecture": (dict(arch="mamba"), "architecture 'mamba'"),
    "unsupported block type": (dict(bad_type="blk.0.ffn_up.weight"), "tensor blk.0.ffn_up.weight is Q2_K"),
    "not a model": (dict(kind="adapter"), "not a model"),
    "a missing tensor": (dict(drop="output_norm.weight"), "lack output_norm"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_file_is_refused_naming_it_and_what_is_wrong(files, tmp_path, monkeypatch, case):
    from lsp_server.model.runtime import ModelLoadError, load_model

    change, why = BAD_FILES[case]
    bad = _write_variant(files["qwen2"], tmp_path, **change)
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelLoadError) as e:
        load_model(str(bad), "cpu")
    assert str(bad) in str(e.value) and why in str(e.value), str(e.value)
    cache = tmp_path / "cache"
    assert not cache.exists() or not [p for p in cache.rglob("*") if p.is_file()]  # nothing written


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_a_truncated_file_is_refused_naming_it(files, tmp_path, monkeypatch, cut):
    from lsp_server.model.runtime import ModelLoadError, load_model

    data = files["gemma3"].read_bytes()
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[: int(len(data) * cut)])
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelLoadError, match=re.escape(str(bad)) + ".*(truncated|cut off)"):
        load_model(str(bad), "cpu")
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        load_model(str(not_gguf), "cpu")


@pytest.mark.slow
def test_the_cli_completes_with_every_architecture_and_every_itemcompiles(files, tmp_path):
    """Sampling at temperature 1 (random weights greedily repeat one token to the limit): every
    architecture offers something, and every offered item makes the file compile."""
    texts = ["import os\n\n\ndef total(values):\n    result = 0\n    for v in values:\n        result += v\n    return ",
             "import os\n\npath = os.", "def scale(values, factor):\n    return [v * "]
    rows_in = []
    for n, text in enumerate(texts):
        doc = tmp_path / f"doc{n}.py"
        doc.write_text(text)
        lines = text.split("\n")
        rows_in.append(json.dumps({"path": str(doc), "line": len(lines) - 1, "character": len(lines[-1])}) + "\n")
    cuts = tmp_path / "cuts.jsonl"
    cuts.write_text("".join(rows_in))
    by_path = {str(tmp_path / f"doc{n}.py"): t for n, t in enumerate(texts)}
    for arch, path in files.items():
        out = subprocess.run([sys.executable, "-m", "lsp_server.cli", "complete", "--batch", str(cuts),
                              "--model", str(path), "--max-tokens", "12", "--temperature", "1.0", "--seed", "1"],
                             capture_output=True, text=True, cwd=ROOT, timeout=900)
        assert out.returncode == 0, (arch, out.stderr[-3000:])
        rows = [json.loads(x) for x in out.stdout.splitlines()]
        assert len(rows) == len(texts), (arch, rows)
        offered = [r for r in rows if r["text"]]  # an empty answer offers nothing (no compilable end within the limit)
        assert offered, (arch, rows)
        failing = [(r["path"], r["text"], r.get("stop_reason")) for r in offered if not compiles(by_path[r["path"]] + r["text"])]
        assert not failing, (arch, failing)


@pytest.mark.slow
def test_a_server_given_a_bad_file_says_why_and_recovers(files, tmp_path, tiny_model_dir):
    """The server stays up: status "error" naming the file and its unsupported tensor, empty
    answers, and it serves once the setting names a good model."""
    from raw_lsp import RawServer

    bad = _write_variant(files["qwen2"], tmp_path, bad_type="blk.1.attn_q.weight")
    with RawServer() as s:
        s.initialize({"model": str(bad), "maxTokens": 4}, wait="error")
        error = s.status("error")["params"]["message"]
        assert str(bad) in error and "blk.1.attn_q.weight is Q2_K" in error, error
        s.open("file:///a.py", "import os\nos.pa")
        assert s.response(s.inline("file:///a.py", 1, 5))["result"]["items"] == []
        s.notify("workspace/didChangeConfiguration", {"settings": {"syntaxlock": {"model": str(tiny_model_dir)}}})
        s.status("ready")


@pytest.mark.slow
def test_the_server_completes_with_a_sentencepiece_file_and_every_itemcompiles(tmp_path):
    """A Gemma 3 stand-in whose tokenizer is SentencePiece (`▁` for a space, byte fallback,
    scores instead of merges: a model trained here) served by the real server over stdio: its
    mask store is built from the file's own vocabulary, and every offered item compiles."""
    pytest.importorskip("sentencepiece", reason="the dev extra installs sentencepiece (trains the vocabulary)")
    from gguf_vocab_support import add_sentencepiece_vocab, train_sentencepiece, write_vocab_gguf
    from raw_lsp import RawServer

    vocab = tmp_path / "spm-vocab.gguf"
    write_vocab_gguf(vocab, lambda w: add_sentencepiece_vocab(w, train_sentencepiece(), add_space_prefix=False))
    path = write_stand_in(tmp_path / "gemma3-spm.gguf", SHAPES["tiny-gemma3"], cycling_types(ALL_TYPES),
                          vocab_gguf=vocab, seed=4)
    texts = ["import os\n\npath = os.", "def scale(values, factor):\n    result = []\n    for v in values:\n        ",
             "class Point:\n    def __init__(self, x, y):\n        self.x = ", "total = 0\nfor n in range(10):\n    total += ",
             "def area(w, h):\n    return "]
    offered = []
    with RawServer() as s:
        # no speculation: its drafts depend on timing, and with sampling so would the answers
        s.initialize({"model": str(path), "maxTokens": 10, "temperature": 1.0, "seed": 3, "latencyBudgetMs": 0,
                      "speculative": False}, wait="ready")
        for n, text in enumerate(texts):
            uri = f"file:///doc{n}.py"
            s.open(uri, text)
            lines = text.split("\n")
            items = s.response(s.inline(uri, len(lines) - 1, len(lines[-1])))["result"]["items"]
            offered += [(text, item["insertText"]) for item in items if item["insertText"]]
    assert offered, "the server offered nothing"
    failing = [(t, i) for t, i in offered if not compiles(t + i)]
    assert not failing, failing
