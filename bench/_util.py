"""Helpers shared by the benchmarks: timing statistics and the stdlib corpus."""

from __future__ import annotations

import io
import sysconfig
import time
import tokenize
import warnings
from pathlib import Path

import numpy as np

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def stats_us(samples_s) -> dict:
    a = np.asarray(samples_s, dtype=float) * 1e6
    return {
        "n": int(a.size),
        "mean_us": round(float(a.mean()), 2),
        "p50_us": round(float(np.percentile(a, 50)), 2),
        "p95_us": round(float(np.percentile(a, 95)), 2),
        "p99_us": round(float(np.percentile(a, 99)), 2),
    }


def stats_ms(samples_s) -> dict:
    a = np.asarray(samples_s, dtype=float) * 1e3
    return {
        "n": int(a.size),
        "mean_ms": round(float(a.mean()), 3),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p90_ms": round(float(np.percentile(a, 90)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
    }


def timed(fn, *args):
    t = time.perf_counter()
    r = fn(*args)
    return r, time.perf_counter() - t


def read_source(path: Path) -> bytes | None:
    raw = path.read_bytes()
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        data = raw.decode(enc).encode()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(raw, str(path), "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError):
        return None
    return data


def stdlib_files(include_tests: bool = False) -> list[Path]:
    out = []
    for p in sorted(STDLIB.rglob("*.py")):
        rel = p.relative_to(STDLIB).parts
        if rel[0] == "site-packages" or any(part.startswith(".") for part in rel):
            continue
        if not include_tests and any(x in ("test", "tests", "idle_test") for x in rel[:-1]):
            continue
        out.append(p)
    return out
