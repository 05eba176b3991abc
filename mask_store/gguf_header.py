"""A GGUF file's header read in a fraction of a second: its metadata and where each tensor is.

A GGUF file is a header (magic `GGUF`, version, the metadata as typed key/value pairs, then for
each tensor its name, dimensions, ggml type and offset) followed by the tensors' data, aligned
(`general.alignment`, 32 by default). `gguf.GGUFReader` reads the same header, but it makes a
Python object for every element of every array: Gemma 3's 262,144-token vocabulary (three arrays
of that length) took it 13 s, where the model must load in a few seconds and a bad file must be
refused within one. Here numeric arrays are `numpy` views of the file and a string array is read
in one pass; what it is used for (the tokenizer, the model's shape) reads the values by key.
The tensors' data is not read: `TensorInfo` says where it is (the model maps it).

Written by hand because no library reads the header without that cost; the format is gguf's
(`gguf.constants` gives the value types and the tensors' block sizes, used here), and
`tests/test_gguf_header.py` checks every value against `GGUFReader` on files `GGUFWriter` wrote.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# gguf's value types (gguf.constants.GGUFValueType): the fixed-size ones, as numpy dtypes
_SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8",
            12: "<f8"}
_STRUCT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
_BOOL, _STRING, _ARRAY = 7, 8, 9


class GgufHeaderError(ValueError):
    """The file is not a GGUF file this reader can read; the message names the file and says why."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as the header describes it: `dims` in GGUF's order (the row length first), its
    ggml type number, and where its data starts (from the start of the file)."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape in numpy's order (rows, then the row length)."""
        return tuple(reversed(self.dims))


@dataclass(frozen=True, eq=False)
class GgufHeader:
    path: Path
    version: int
    metadata: dict  # key: int, float, bool, str, list[str] or a numpy array (numeric arrays)
    tensors: dict[str, TensorInfo]
    data_start: int
    file_size: int

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)


class _Cursor:
    """Reads little-endian values from the start of the file, reading more of it as needed
    (the header only: a few MB), saying where a value is cut off."""

    FIRST_READ = 1 << 20

    def __init__(self, f, size: int, path: Path) -> None:
        self.f, self.size, self.path = f, size, path
        self.buf, self.pos = f.read(min(size, self.FIRST_READ)), 0

    def need(self, n: int, what: str) -> int:
        at = self.pos
        if n < 0 or at + n > self.size:
            raise GgufHeaderError(f"{self.path}: the header is cut off in {what} (truncated or corrupt?)")
        if at + n > len(self.buf):
            more = max(at + n - len(self.buf), len(self.buf))  # at least doubled: few reads
            self.buf += self.f.read(min(more, self.size - len(self.buf)))
        self.pos = at + n
        return at

    def scalar(self, fmt: str, what: str):
        size = struct.calcsize(fmt)
        return struct.unpack_from(fmt, self.buf, self.need(size, what))[0]

    def string(self, what: str) -> str:
        n = self.scalar("<Q", what)
        at = self.need(n, what)
        try:
            return self.buf[at:at + n].decode("utf-8")
        except UnicodeDecodeError as e:
            raise GgufHeaderError(f"{self.path}: {what} is not UTF-8 text ({e})") from e

    def value(self, kind: int, what: str):
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY:
            item, count = self.scalar("<I", what), self.scalar("<Q", what)
            if item == _STRING:
                return self.strings(count, what)
            if item not in _SCALARS:
                raise GgufHeaderError(f"{self.path}: {what} is an array of unknown type {item}")
            dtype = np.dtype(_SCALARS[item])
            at = self.need(count * dtype.itemsize, what)
            values = np.frombuffer(self.buf, dtype=dtype, count=count, offset=at)
            return values.astype(bool) if item == _BOOL else values
        if kind not in _SCALARS:
            raise GgufHeaderError(f"{self.path}: {what} has unknown value type {kind}")
        v = self.scalar(_STRUCT[kind], what)
        return bool(v) if kind == _BOOL else v

    def strings(self, count: int, what: str) -> list[str]:
        out = []
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(count):
            at = self.need(8, what)
            (n,) = unpack(self.buf, at)
            at = self.need(n, what)
            out.append(self.buf[at:at + n].decode("utf-8", errors="surrogateescape"))
        return out


def read_header(path: str | Path) -> GgufHeader:
    """The header of the GGUF file `path` (`GgufHeaderError` naming the file where it is not one
    this reader understands: another format, a big-endian or version-1 file, a cut-off header,
    tensors whose data lies past the end of the file)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if f.read(4) != MAGIC:
                raise GgufHeaderError(f"{path}: not a GGUF file (it does not start with 'GGUF')")
            f.seek(0)
            return _read(_Cursor(f, size, path), path, size)
    except OSError as e:
        raise GgufHeaderError(f"{path}: cannot be read ({e.strerror or e})") from e


def _read(cur: _Cursor, path: Path, size: int) -> GgufHeader:
    cur.need(4, "the magic")
    version = cur.scalar("<I", "the version")
    if version not in (2, 3):
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        why = "a big-endian GGUF file" if swapped in (2, 3) else f"GGUF version {version}"
        raise GgufHeaderError(f"{path}: {why} (this reader takes little-endian versions 2 and 3)")
    n_tensors, n_kv = cur.scalar("<Q", "the tensor count"), cur.scalar("<Q", "the metadata count")
    if n_tensors > size or n_kv > size:
        raise GgufHeaderError(f"{path}: the header's counts are impossible for its size (corrupt?)")
    metadata: dict = {}
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        metadata[key] = cur.value(cur.scalar("<I", f"the type of {key}"), key)
    raw: list[tuple[str, tuple[int, ...], int, int]] = []
    for _ in range(n_tensors):
        name = cur.string("a tensor name")
        n_dims = cur.scalar("<I", f"tensor {name}")
        if n_dims > 8:
            raise GgufHeaderError(f"{path}: tensor {name} claims {n_dims} dimensions (corrupt?)")
        dims = tuple(cur.scalar("<Q", f"tensor {name}") for _ in range(n_dims))
        raw.append((name, dims, cur.scalar("<I", f"tensor {name}"), cur.scalar("<Q", f"tensor {name}")))
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    if alignment <= 0 or alignment & (alignment - 1):
        raise GgufHeaderError(f"{path}: general.alignment {alignment} is not a power of two")
    data_start = -(-cur.pos // alignment) * alignment
    tensors = {}
    for name, dims, kind, offset in raw:
        nbytes = tensor_bytes(dims, kind)
        if nbytes is None:
            raise GgufHeaderError(f"{path}: tensor {name} has ggml type {kind}, which gguf does not know")
        if nbytes == 0:
            raise GgufHeaderError(f"{path}: tensor {name}'s rows of {dims[0]} values are not whole "
                                  f"{type_name(kind)} blocks (corrupt?)")
        start = data_start + offset
        if start + nbytes > size:
            raise GgufHeaderError(f"{path}: tensor {name}'s data lies past the end of the file (truncated?)")
        tensors[name] = TensorInfo(name, dims, kind, start, nbytes)
    return GgufHeader(path, version, metadata, tensors, data_start, size)


def tensor_bytes(dims: tuple[int, ...], ggml_type: int) -> int | None:
    """Bytes of a tensor of `dims` (GGUF's order) and ggml type (None: a type gguf doesn't know;
    0: its rows are not whole blocks of the type)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None
    if not dims:
        return block_bytes
    if dims[0] % block:
        return 0
    n = dims[0] // block * block_bytes
    for d in dims[1:]:
        n *= d
    return n


def type_name(ggml_type: int) -> str:
    """ggml's name of a tensor type (`Q4_K`), or its number where gguf doesn't know it."""
    from gguf.constants import GGMLQuantizationType

    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type {ggml_type}"
