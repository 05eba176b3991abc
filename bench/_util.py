"""Helpers shared by the benchmarks: timing statistics and the code sets they read.

The code sets: the stdlib (where mechanisms are decided) and third-party code (where they are
confirmed): the wheels of widely used pure-Python packages, pinned, downloaded once with pip into
the user cache (`~/.cache/syntaxlock/thirdparty`, or `$SYNTAXLOCK_CACHE/thirdparty`) and never
committed. `code_files("stdlib" | "thirdparty")`."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# the stdlib corpus as the tests read it, and the one oracle's reading of a source file
from corpus_support import STDLIB, read_source, stdlib_files  # noqa: E402

__all__ = ["STDLIB", "read_source", "stdlib_files"]


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


def child_json(cmd: list[str], without: tuple[str, ...] = ()) -> dict:
    """The JSON a benchmark's child process prints last (run from the repository's root, which
    it imports; `without`: environment variables it does not inherit), or {"error": the last
    line of its stderr} when it failed."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in without} | {"PYTHONPATH": str(root)}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][-500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed(fn, *args):
    t = time.perf_counter()
    r = fn(*args)
    return r, time.perf_counter() - t


def p50(fn, reps: int) -> float:
    """The median seconds of `reps` calls of `fn`, after one call not measured (warm-up)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.percentile(times, 50))



# pure-Python wheels, pinned: the same files on every machine
THIRD_PARTY = ("requests==2.32.3", "rich==13.9.4", "attrs==24.2.0", "click==8.1.7", "jinja2==3.1.4",
               "packaging==24.2")
CODE_SETS = ("stdlib", "thirdparty")


def cache_root() -> Path:
    return Path(os.environ.get("SYNTAXLOCK_CACHE") or Path.home() / ".cache" / "syntaxlock") / "thirdparty"



def thirdparty_files(specs=THIRD_PARTY) -> list[Path]:
    """The .py files of the pinned wheels (downloaded and unpacked on first use)."""
    root = cache_root()
    out = []
    for spec in specs:
        name, version = spec.split("==")
        target = root / f"{name}-{version}"
        if not (target / ".unpacked").is_file():
            _fetch(spec, root, target)
        out.extend(sorted(p for p in target.rglob("*.py") if ".dist-info" not in str(p)))
    return out


def _fetch(spec: str, root: Path, target: Path) -> None:
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "-d", str(wheels), spec]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"cannot download {spec} (pip download needs the network once): {done.stderr.strip()}")
    version = spec.split("==")[1]
    found = [w for w in wheels.glob("*.whl")
             if w.name.lower().replace("-", "_").startswith(f"{name.lower().replace('-', '_')}_{version}")]
    if not found:
        raise SystemExit(f"pip downloaded no wheel for {spec} into {wheels}")
    with zipfile.ZipFile(found[0]) as z:
        for member in z.namelist():
            if member.endswith(".py") and not member.startswith("/") and ".." not in Path(member).parts:
                dest = target / member
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(member))
    (target / ".unpacked").write_text(found[0].name)


def code_files(code: str) -> list[Path]:
    """The files of a code set: `stdlib` (tests left out) or `thirdparty`."""
    if code == "stdlib":
        return stdlib_files(include_tests=False)
    if code == "thirdparty":
        return thirdparty_files()
    raise ValueError(f"unknown code set {code!r}: one of {', '.join(CODE_SETS)}")


def files_until_tokens(files, tok, tokens: int, seed: int, keep=None) -> list[tuple[Path, bytes]]:
    """`files` shuffled (seeded), read (unreadable ones and those `keep(data)` refuses skipped),
    until their text holds `tokens` tokens of `tok`: (path, data) pairs."""
    files = list(files)
    random.Random(seed).shuffle(files)
    chosen, total = [], 0
    for p in files:
        data = read_source(p)
        if data is None or (keep is not None and not keep(data)):
            continue
        chosen.append((p, data))
        total += len(tok.encode(data.decode()))
        if total >= tokens:
            break
    return chosen


def relative_name(path: Path) -> str:
    """A file's name within its code set (for reports)."""
    for base in (STDLIB, cache_root()):
        try:
            return str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def process_tree(pid: int) -> list[int]:
    """The process and its descendants, the children of every thread included: a
    `multiprocessing` pool forks its replacement workers (`maxtasksperchild`) from its handler
    thread, and `/proc/PID/task/PID/children` lists only the main thread's children."""
    out = [pid]
    kids: list[str] = []
    for f in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids += f.read_text().split()
        except OSError:
            continue
    for k in kids:
        out += process_tree(int(k))
    return out


def pss_kib(pid: int) -> int:
    """A process's proportional set size (shared pages divided among their processes), KiB."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
