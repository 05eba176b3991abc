"""The C kernels' shared library: which build this CPU runs, compiled once per machine with the
system's C compiler and loaded with ctypes (the kernels' calls: `library.DecodeKernels`).

`load()` gives the `DecodeKernels` or None: no `gcc`/`cc`, or the build failed (logged once;
`unavailable()` says why). Callers then keep PyTorch's own products. The shared library lives
in the per-user cache, named by a hash of every source file it compiles (`SOURCES`), the
compiler flags and the compiler's own version, so a changed source or compiler is rebuilt and
concurrent builds never see a half-written file. `build(sanitize=True)` builds them with
AddressSanitizer, for the tests.

Three builds (`ISAS`): "avx512" where the CPU has AVX-512F (-mavx512bw and -mavx512vnni added
where it has them), "avx2" where it has AVX2, FMA and F16C, and "portable" elsewhere (plain C,
no intrinsics). `load()` takes the widest the CPU runs (`chosen_isa`);
`SYNTAXLOCK_KERNELS=avx512|avx2|portable` forces one (`SYNTAXLOCK_NO_AVX512=1` means avx2).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

from grammar_tools import cache

from .library import DecodeKernels

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("decode_kernels.c")  # the file compiled; it includes the headers
SOURCES = (SOURCE, *(SOURCE.with_name(h) for h in ("simd.h", "block_formats.h", "int8_products.h", "kquant_products.h")))
FLAGS = ["-O3", "-fopenmp", "-shared", "-fPIC"]
ISAS = ("avx512", "avx2", "portable")  # widest first
ISA_FLAGS = {
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "avx512": ["-mavx2", "-mfma", "-mf16c", "-mavx512f"],
    "portable": ["-ffp-contract=off"],  # simd.h's float16 conversions need each operation rounded
}
# added to the avx512 build where the CPU has them (the int8 products' byte instructions, vpdpbusd)
WIDE_EXTRA_FLAGS = {"avx512bw": "-mavx512bw", "avx512_vnni": "-mavx512vnni"}
SANITIZE_FLAGS = ["-O1", "-fsanitize=address", "-fno-omit-frame-pointer", "-g"]  # the tests' build (-O1 after -O3: ASan's advice; the three builds took 3 min at -O3)
NEEDED_CPU_FLAGS = {"avx2", "fma", "f16c"}


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags (from /proc/cpuinfo, read once; empty off Linux x86)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_supported() -> bool:
    """The CPU has the instructions of the avx2 build (else the portable build runs)."""
    return NEEDED_CPU_FLAGS <= cpu_flags()


def runnable_isas() -> tuple[str, ...]:
    """The builds this CPU can run, widest first (the portable build runs anywhere)."""
    flags = cpu_flags()
    x86 = NEEDED_CPU_FLAGS <= flags
    return tuple(isa for isa in ISAS
                 if isa == "portable" or (x86 and (isa == "avx2" or "avx512f" in flags)))


def chosen_isa() -> str:
    """The build `load()` takes: `SYNTAXLOCK_KERNELS` where set (avx512, avx2 or portable),
    avx2 where `SYNTAXLOCK_NO_AVX512=1`, else the widest this CPU runs. A forced build the CPU
    can't run is still named (`load` then says why not)."""
    forced = os.environ.get("SYNTAXLOCK_KERNELS", "").strip().lower()
    if forced:
        return forced
    runnable = runnable_isas()
    if os.environ.get("SYNTAXLOCK_NO_AVX512", "") not in ("", "0") and "avx2" in runnable:
        return "avx2"
    return runnable[0]


def wide_supported() -> bool:
    """The AVX-512 build is the one `load()` takes here."""
    return chosen_isa() == "avx512"


def build_flags(isa: str, sanitize: bool = False) -> list[str]:
    """The compiler flags of a build (`ISAS`)."""
    if isa not in ISA_FLAGS:
        raise ValueError(f"no kernel build {isa!r} (one of {', '.join(ISAS)})")
    extra = [flag for cpu, flag in WIDE_EXTRA_FLAGS.items() if cpu in cpu_flags()] if isa == "avx512" else []
    return FLAGS + ISA_FLAGS[isa] + extra + (SANITIZE_FLAGS if sanitize else [])


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "gcc", "cc"):
        if name and shutil.which(name):
            return name
    return None


@functools.cache
def compiler_identity(cc: str) -> str:
    """What the compiler says it is (`cc --version`, its resolved path): part of the build's
    key, so that another compiler, or an upgrade of this one, builds anew."""
    path = shutil.which(cc) or cc
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        out = f"unknown ({e})"
    return f"{os.path.realpath(path)}\n{out.strip()}"


def _isa_name(isa) -> str:
    """A build's name from a name or, as the callers before the portable build said it, a
    bool (True: avx512, False: avx2)."""
    if isinstance(isa, bool):
        return "avx512" if isa else "avx2"
    return isa


_lock = threading.Lock()
_loaded: dict[str, DecodeKernels | None] = {}
_why_not: dict[str, str] = {}  # why a build couldn't be loaded


def build_target(out_dir: Path | None = None, isa="avx2", sanitize: bool = False) -> Path:
    """The library's file: named by a hash of every source file (`SOURCES`), the flags and the
    compiler (its path and what it says its version is)."""
    isa = _isa_name(isa)
    cc = _compiler() or ""
    sources = b"".join(p.name.encode() + b"\0" + p.read_bytes() + b"\0" for p in SOURCES)
    digest = cache.content_hash(sources, " ".join(build_flags(isa, sanitize)), compiler_identity(cc))
    return (out_dir or cache.cache_dir() / "kernels") / f"decode_kernels-{isa}-{digest}.so"


def build(out_dir: Path | None = None, isa="avx2", sanitize: bool = False) -> Path:
    """Compile the kernels' build `isa` (one of `ISAS`; `sanitize`: with AddressSanitizer) into
    `out_dir` (the cache by default) unless it is there; its path. Raises RuntimeError with the
    compiler's message when it can't be built."""
    isa = _isa_name(isa)
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (gcc or cc) on PATH")
    target = build_target(out_dir, isa, sanitize)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    proc = subprocess.run([cc, *build_flags(isa, sanitize), str(SOURCE), "-o", str(tmp)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{cc} failed: {proc.stderr.strip()[:2000]}")
    os.replace(tmp, target)
    return target


def _load_key(isa=None) -> tuple[str, str]:
    isa = chosen_isa() if isa is None else _isa_name(isa)
    return f"{cache.cache_dir()}:{isa}", isa


def load(isa=None) -> DecodeKernels | None:
    """The kernels' build `isa` ("avx512", "avx2" or "portable"; default `chosen_isa()`, which
    is what the models use), built and loaded once per process; None where it can't run here."""
    key, isa = _load_key(isa)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        kernel = None
        if isa not in ISAS:
            _why_not[key] = f"SYNTAXLOCK_KERNELS={isa!r} is not a build ({', '.join(ISAS)})"
        elif isa not in runnable_isas():
            _why_not[key] = f"this CPU can't run the {isa} build (it lacks {_missing(isa)})"
        else:
            try:
                kernel = DecodeKernels(ctypes.CDLL(str(build(isa=isa))), isa)
            except (OSError, RuntimeError) as e:
                _why_not[key] = str(e)
        if kernel is None:
            log.warning("decoding kernels unavailable (%s); using PyTorch's products", _why_not[key])
        _loaded[key] = kernel
        return kernel


def _missing(isa: str) -> str:
    need = NEEDED_CPU_FLAGS | ({"avx512f"} if isa == "avx512" else set())
    return "/".join(sorted(f.upper() for f in need - cpu_flags())) or "nothing"


def unavailable(isa=None) -> str | None:
    """Why `load(isa)` gives None here (None when it gives the kernels)."""
    if load(isa) is not None:
        return None
    return _why_not.get(_load_key(isa)[0], "not loaded")
