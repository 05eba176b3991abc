"""`decode_kernels.c` (with its headers), built once per machine with the system's C compiler and
loaded with ctypes.

`load()` gives the `DecodeKernels` or None: no `gcc`/`cc`, or the build failed (logged once;
`unavailable()` says why). Callers then keep PyTorch's own products. The shared library lives
in the per-user cache, named by a hash of every source file it compiles (`SOURCES`), the
compiler flags and the compiler's own version, so a changed source or compiler is rebuilt and
concurrent builds never see a half-written file. Every call is checked first (`boundary`):
dtype, shape, memory layout and sizes, or a `KernelArgumentError`. `build(sanitize=True)`
builds them with AddressSanitizer, for the tests.

- `DecodeKernels.half_matmul(x, w)`: float32 rows times float16 weights (`half_weights`);
  `DecodeKernels.matmul(x, w)`: the same for float16 weights or a `block_weights.BlockMatrix`
  in any of its formats (GGUF's Q4_0 .. Q6_K blocks, F32, BF16): products of at most
  `INT8_ROWS` rows of quantized weights (decoding steps, verification passes) quantize each row
  to int8 and multiply in integers (llama.cpp's way), longer ones (prompts) de-quantize the
  weights exactly to float32 inside the kernel;
- `DecodeKernels.dequantize(w, ids)`: rows of a `BlockMatrix` as float32, gguf's exact values;
- `DecodeKernels.row_attention(q, k, v, scale)`: causal attention of the last few positions
  over the KV cache; `use_row_attention(model)` routes a model's attention through it for
  passes of at most `MAX_ATTENTION_ROWS` rows (PyTorch's SDPA for longer ones, the prompts);
- `decoder_layer`: a whole decoder layer (any family `architectures` describes) for a few rows in one call;
  `use_fused_layers(model)` makes each decoder layer use it for such passes over a
  `GrowingCache` (`fused_layers`);
- `decoder_layers`: all the decoder layers of a short pass in one call and one parallel region
  (`cpu_decoder`'s decoding steps and verification passes over a `CpuCache`): ~40 µs of Python,
  checks and ctypes per layer were ~1.2 ms of a step.

The attention reads a float32 or a float16 KV cache (`kv_cache.KV_DTYPE`), converting float16
keys and values exactly when read.

Every product and layer gives a row the same bits whatever the number of rows in the pass, so a
speculative verification pass reproduces exactly what single decoding steps would have computed.

Three builds (`DecodeKernels.isa` says which): "avx512" where the CPU has AVX-512F (16-wide
float products; -mavx512bw and -mavx512vnni added where it has them: `vpdpbusd` for the int8
products), "avx2" where it has AVX2, FMA and F16C, and "portable" elsewhere (plain C, no
intrinsics: ARM laptops, old x86). `load()` takes the widest the CPU runs;
`SYNTAXLOCK_KERNELS=avx512|avx2|portable` forces one (`SYNTAXLOCK_NO_AVX512=1` means avx2).
The float products sum in a different order in the avx512 build than in the other two, so
their bits differ between builds, never between the rows of one build; the int8 products are
the same operations in the avx2 and avx512 builds (the same bits).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from grammar_tools import cache

from . import boundary
from .block_weights import BlockMatrix, WeightFormat

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("decode_kernels.c")  # the file compiled; it includes the headers
SOURCES = (SOURCE, *(SOURCE.with_name(h) for h in ("simd.h", "block_formats.h", "int8_products.h", "kquant_products.h")))
MAX_ATTENTION_ROWS = 32  # passes with more query rows (prompts) keep PyTorch's attention
INT8_ROWS = 32  # products of at most this many rows of quantized weights take the int8 path (the C's INT8_ROWS)
ATTENTION_NAME = "syntaxlock_rows"  # the attention implementation registered with transformers
FLAGS = ["-O3", "-fopenmp", "-shared", "-fPIC"]
ISAS = ("avx512", "avx2", "portable")  # widest first
ISA_FLAGS = {
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "avx512": ["-mavx2", "-mfma", "-mf16c", "-mavx512f"],
    "portable": ["-ffp-contract=off"],  # simd.h's float16 conversions need each operation rounded
}
# added to the avx512 build where the CPU has them (the int8 products' byte instructions, vpdpbusd)
WIDE_EXTRA_FLAGS = {"avx512bw": "-mavx512bw", "avx512_vnni": "-mavx512vnni"}
ISA_NUMBERS = {"avx512": 2, "avx2": 1, "portable": 0}  # what the library's `kernel_isa()` says
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


def weight_storage(w) -> torch.Tensor:
    """The tensor a weight's pointer is taken from: a float16 matrix itself, a `BlockMatrix`'s blocks."""
    return w.blocks if isinstance(w, BlockMatrix) else w


def weight_format(w) -> WeightFormat:
    return w.format if isinstance(w, BlockMatrix) else WeightFormat.F16


def _isa_name(isa) -> str:
    """A build's name from a name or, as the callers before the portable build said it, a
    bool (True: avx512, False: avx2)."""
    if isinstance(isa, bool):
        return "avx512" if isa else "avx2"
    return isa


# The C order of a layer's tensors (decode_kernels.c's T_* constants) and integers (I_*)
LAYER_TENSORS = ("attn_norm", "attn_norm_bias", "ffn_norm", "ffn_norm_bias", "q", "k", "v", "o", "gate", "up",
                 "down", "q_bias", "k_bias", "v_bias", "o_bias", "up_bias", "down_bias", "q_norm", "k_norm",
                 "attn_post_norm", "ffn_post_norm")
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")
LAYER_INTS = 9  # the 7 projections' formats, the window, the rotary table


@dataclass(frozen=True)
class LayerWeights:
    """A decoder layer's constant arguments to `decoder_layers` (see `DecodeKernels.layer_weights`):
    checked when made; `tensors` in the C order (`LAYER_TENSORS`, None where the layer has
    none), `pointers` their addresses as checked (0 for None), `ints` the C integers."""

    tensors: tuple
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    scale: float
    kinds: tuple[int, int, int]  # the norm's, the MLP's, the rotary's (architectures.Norm, FeedForward, Rotary)
    window: int
    table: int
    pointers: tuple[int, ...]
    ints: tuple[int, ...]

    @property
    def hidden(self) -> int:
        return self.tensors[0].shape[0]

    @property
    def weights(self) -> tuple:
        """The projections q, k, v, o, gate, up, down (gate None in a plain MLP)."""
        return self.tensors[4:11]

    def current_pointers(self) -> tuple[int, ...]:
        return tuple(0 if t is None else weight_storage(t).data_ptr() for t in self.tensors)


@dataclass(frozen=True)
class LayerStack:
    """The constant arguments of `decoder_layers` for several layers (see
    `DecodeKernels.layer_stack`): the layers' checked `LayerWeights`, their tensors (flat, None
    kept) and those tensors' addresses, also in one C array, and their integers in another."""

    layers: tuple[LayerWeights, ...]
    tensors: tuple
    array: ctypes.Array
    pointers: tuple[int, ...]
    ints: ctypes.Array
    kinds: ctypes.Array

    def current_pointers(self) -> tuple[int, ...]:
        """The tensors' addresses now (a step checks all 630 of SmolLM2's in ~40 µs)."""
        return tuple(0 if t is None else weight_storage(t).data_ptr() for t in self.tensors)


class DecodeKernels:
    """The compiled kernels (see the module's doc)."""

    def __init__(self, lib: ctypes.CDLL, isa: str = "avx2") -> None:
        if lib.kernel_isa() != ISA_NUMBERS.get(isa):
            raise OSError(f"{lib._name} is not the {isa} build of the kernels")
        self.isa = isa  # "avx512", "avx2" or "portable"
        self._dequantize = lib.dequantize_matrix
        self._dequantize.restype = None
        self._dequantize.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64,
                                     ctypes.c_void_p, ctypes.c_int]
        self._quantize = lib.quantize_activations
        self._quantize.restype = None
        self._quantize.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self._quantize_k = lib.quantize_activations_k
        self._quantize_k.restype = None
        self._quantize_k.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self._matmul = lib.half_matmul
        self._matmul.restype = None
        self._matmul.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
        self._weights_matmul = lib.weights_matmul
        self._weights_matmul.restype = ctypes.c_int
        self._weights_matmul.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int] * 4
        self._attention = lib.row_attention
        self._attention.restype = None
        self._attention.argtypes = ([ctypes.c_void_p] * 4 + [ctypes.c_int] * 5
                                    + [ctypes.c_int64] * 2 + [ctypes.c_float, ctypes.c_int, ctypes.c_int])
        if (lib.layer_tensors(), lib.layer_ints()) != (len(LAYER_TENSORS), LAYER_INTS):
            raise OSError(f"{lib._name} lays a layer's arguments out otherwise than library.py")
        self._layers = lib.decoder_layers
        self._layers.restype = ctypes.c_int
        self._layers.argtypes = ([ctypes.c_void_p] + [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3 + [ctypes.c_float]
                                 + [ctypes.c_int] * 4 + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2
                                 + [ctypes.c_int, ctypes.c_float] + [ctypes.c_int] * 2)

    @staticmethod
    def fits(weight) -> bool:
        """`matmul` can multiply by this weight: a `BlockMatrix` (rows of F32/BF16 values a
        multiple of 8 long), or a CPU 2-D tensor whose rows are a multiple of 8 long
        (`half_matmul`'s)."""
        if isinstance(weight, BlockMatrix):
            return weight.cols % 8 == 0
        return weight.device.type == "cpu" and weight.dim() == 2 and weight.shape[1] % 8 == 0

    def matmul(self, x: torch.Tensor, w) -> torch.Tensor:
        """x @ w.T for float32 `x` [..., K] and `w` [N, K]: a float16 tensor (`half_matmul`) or
        a `BlockMatrix`. Quantized weights and at most `INT8_ROWS` rows: each row quantized to
        int8 in units of 32 values, integer products, float scales (`int8_products.h`: within
        max|x_unit| / 254 * sum|w_unit| per unit of the float64 product); for K-quant weights in
        blocks of 256 values, the sub-block scales applied in integers (`kquant_products.h`:
        within max|x_block| / 254 * sum|w_block| per block of 256); else the weights' exact
        values multiplied as float16 ones are. Each row's result is the same whatever the
        number of rows, up to `INT8_ROWS`, and again above it."""
        if not isinstance(w, BlockMatrix):
            return self.half_matmul(x, w)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        m, k = x2.shape
        y = torch.empty((m, w.rows), dtype=torch.float32)
        threads = torch.get_num_threads()
        boundary.check_block_matmul(x2, w, y)
        boundary.check_threads("weights_matmul", threads)
        if not self._weights_matmul(x2.data_ptr(), w.blocks.data_ptr(), int(w.format), y.data_ptr(), m, w.rows, k,
                                    threads):
            raise MemoryError("weights_matmul: no memory for its de-quantized panels")
        return y.reshape(*lead, w.rows)

    def dequantize(self, w: BlockMatrix, ids: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` (int64 [n], each in [0, rows); all rows where None) of `w` as float32
        [n, cols]: gguf's de-quantized values, bit for bit."""
        boundary.check_dequantize(w, ids)
        n = w.rows if ids is None else ids.shape[0]
        out = torch.empty((n, w.cols), dtype=torch.float32)
        threads = torch.get_num_threads()
        boundary.check_threads("dequantize_matrix", threads)
        if n:
            self._dequantize(w.blocks.data_ptr(), int(w.format), w.cols, None if ids is None else ids.data_ptr(), n,
                             out.data_ptr(), threads)
        return out

    def quantize_activations(self, x: torch.Tensor) -> torch.Tensor:
        """The rows of float32 `x` [M, K] (K a multiple of 32) as the int8 products quantize them:
        uint8 [M, 4 K] in `int8_products.h`'s layout (for the tests)."""
        boundary.check_activations(x)
        m, k = x.shape
        out = torch.empty((m, 4 * k), dtype=torch.uint8)
        self._quantize(x.data_ptr(), m, k, out.data_ptr())
        return out

    def quantize_activations_k(self, x: torch.Tensor) -> torch.Tensor:
        """The rows of float32 `x` [M, K] (K a multiple of 256) as the K-quant products quantize
        them: uint8 [M, K + K / 64 + K / 8] in `kquant_products.h`'s layout (for the tests)."""
        boundary.check_activations(x, 256)
        m, k = x.shape
        out = torch.empty((m, k + k // 64 + k // 8), dtype=torch.uint8)
        self._quantize_k(x.data_ptr(), m, k, out.data_ptr())
        return out

    def half_matmul(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x @ w.T for float32 `x` [..., K] and a contiguous float16 `w` [N, K] that `fits`."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        m, k = x2.shape
        n = w.shape[0] if isinstance(w, torch.Tensor) and w.dim() == 2 else 0
        y = torch.empty((m, n), dtype=torch.float32)
        threads = torch.get_num_threads()
        boundary.check_half_matmul(x2, w, y)
        boundary.check_threads("half_matmul", threads)
        self._matmul(x2.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, k, threads)
        return y.reshape(*lead, n)

    @staticmethod
    def layer_weights(in_norm: torch.Tensor, post_norm: torch.Tensor, eps: float, weights, heads: int,
                      kv_heads: int, head_dim: int, ffn: int, scale: float, *, norm_biases=(None, None),
                      biases=(None,) * 6, qk_norms=(None, None), output_norms=(None, None),
                      kinds: tuple[int, int, int] = (0, 0, 0), window: int = 0, table: int = 0) -> LayerWeights:
        """A decoder layer's constant arguments, checked (`boundary`): its input norm and the
        MLP's (`in_norm`, `post_norm`, float32 [E]), the projections q, k, v, o, gate, up, down
        (float16 tensors or `BlockMatrix`es; gate None for a plain MLP); optionally the norms'
        biases (LayerNorm), the biases of q, k, v, o, up and down, the per-head norms of q and
        k [D], the norms of the attention's and the MLP's outputs [E]; the kinds of norm, MLP
        and rotary (`architectures.Norm`, `FeedForward`, `Rotary`), the attention window (0:
        every position), and which of the pass's rotary tables the layer uses."""
        weights = tuple(weights)
        if len(weights) != len(PROJECTIONS) or len(biases) != 6:
            raise boundary.KernelArgumentError(
                "decoder_layer", "weights", f"must be the {len(PROJECTIONS)} projections {list(PROJECTIONS)} "
                f"(and 6 biases), not {len(weights)} (and {len(biases)})")
        tensors = (in_norm, norm_biases[0], post_norm, norm_biases[1], *weights, *biases, *qk_norms, *output_norms)
        boundary.check_layer_weights(dict(zip(LAYER_TENSORS, tensors)), heads, kv_heads, head_dim, ffn, kinds,
                                     window, table)
        ints = tuple(int(weight_format(w)) if w is not None else 0 for w in weights) + (window, table)
        layer = LayerWeights(tensors, float(eps), heads, kv_heads, head_dim, ffn, float(scale), tuple(kinds), window,
                             table, (), ints)
        return replace(layer, pointers=layer.current_pointers())

    def decoder_layer(self, h: torch.Tensor, layer: LayerWeights, cos: torch.Tensor, sin: torch.Tensor,
                      kv, past: int) -> None:
        """One decoder layer for the rows of `h` [1, Q, E] (updated in place: the residual
        stream); cos/sin [T, Q, head_dim], the pass's rotary tables; the new keys and values go
        to positions past .. past+Q-1 of the `kv_cache.GrowingBuffers` `kv` (room made by the
        caller: `append_layer` does both)."""
        if not isinstance(layer, LayerWeights) or layer.pointers != layer.current_pointers():
            raise boundary.KernelArgumentError(
                "decoder_layer", "layer", "must be LayerWeights whose tensors are as checked"
            )
        k_buf, v_buf = kv._k, kv._v
        threads = torch.get_num_threads()
        boundary.check_layer_call(h, layer.hidden, layer.kv_heads, layer.head_dim, layer.table, cos, sin, k_buf,
                                  v_buf, past)
        boundary.check_threads("decoder_layer", threads)
        array = (ctypes.c_void_p * len(layer.pointers))(*layer.pointers)
        ints = (ctypes.c_int * len(layer.ints))(*layer.ints)
        kinds = (ctypes.c_int * 3)(*layer.kinds)
        if not self._layers(h.data_ptr(), h.shape[1], h.shape[2], 1, array, ints, kinds, layer.eps, layer.heads,
                            layer.kv_heads, layer.head_dim, layer.ffn, cos.data_ptr(), sin.data_ptr(),
                            k_buf.data_ptr(), v_buf.data_ptr(), 0, k_buf.stride()[1], past, layer.scale,
                            int(k_buf.dtype is torch.float16), threads):
            raise MemoryError("decoder_layer: no memory for its scratch buffers")

    @staticmethod
    def layer_stack(layers) -> LayerStack:
        """The constant arguments of `decoder_layers` for these `LayerWeights` (in order), which
        must share their sizes, kinds, norms' epsilon and scale."""
        layers = tuple(layers)
        if not layers or not all(isinstance(w, LayerWeights) for w in layers):
            raise boundary.KernelArgumentError("decoder_layers", "layers", "must be one or more LayerWeights")
        first = layers[0]
        shared = lambda w: (w.hidden, w.eps, w.heads, w.kv_heads, w.head_dim, w.ffn, w.scale, w.kinds)  # noqa: E731
        if any(shared(w) != shared(first) for w in layers):
            raise boundary.KernelArgumentError("decoder_layers", "layers",
                                               "must share their sizes, kinds, norms' epsilon and scale")
        tensors = tuple(t for w in layers for t in w.tensors)
        pointers = tuple(0 if t is None else weight_storage(t).data_ptr() for t in tensors)
        if pointers != tuple(p for w in layers for p in w.pointers):
            raise boundary.KernelArgumentError("decoder_layers", "layers", "must be LayerWeights whose tensors are as checked")
        ints = [i for w in layers for i in w.ints]
        return LayerStack(layers, tensors, (ctypes.c_void_p * len(pointers))(*pointers), pointers,
                          (ctypes.c_int * len(ints))(*ints), (ctypes.c_int * 3)(*first.kinds))

    def decoder_layers(self, h: torch.Tensor, stack: LayerStack, cos: torch.Tensor, sin: torch.Tensor, cache) -> None:
        """Every layer of `stack` in turn for the rows of `h` [1, Q, E] (updated in place), in
        one call: the same bits as `append_layer` layer by layer; cos/sin [T, Q, head_dim], the
        pass's rotary tables. `cache` is a `kv_cache.CpuCache` whose layers all hold the same
        number of positions; room is made for the new ones and they are counted as held after."""
        if not isinstance(stack, LayerStack) or stack.current_pointers() != stack.pointers:
            raise boundary.KernelArgumentError(
                "decoder_layers", "stack", "must be a LayerStack whose tensors are as checked"
            )
        past, rows = cache.get_seq_length(), h.shape[1] if h.dim() == 3 else 0
        if len(cache.layers) != len(stack.layers) or not cache.lengths_agree(past):
            raise boundary.KernelArgumentError(
                "decoder_layers", "cache", f"must have {len(stack.layers)} layers holding the same positions"
            )
        w = stack.layers[0]
        cache.reserve(past + rows, w.kv_heads, w.head_dim)
        keys, values = cache.k, cache.v
        threads = torch.get_num_threads()
        boundary.check_layers_call(h, w.hidden, len(stack.layers), w.kv_heads, w.head_dim,
                                   max(layer.table for layer in stack.layers), cos, sin, keys, values, past)
        boundary.check_threads("decoder_layers", threads)
        if not self._layers(h.data_ptr(), rows, h.shape[2], len(stack.layers), stack.array, stack.ints, stack.kinds,
                            w.eps, w.heads, w.kv_heads, w.head_dim, w.ffn, cos.data_ptr(), sin.data_ptr(),
                            keys.data_ptr(), values.data_ptr(), keys.stride(0), keys.stride(1), past, w.scale,
                            int(keys.dtype is torch.float16), threads):
            raise MemoryError("decoder_layers: no memory for its scratch buffers")
        cache.extend(rows)

    def append_layer(self, h: torch.Tensor, layer: LayerWeights, cos: torch.Tensor, sin: torch.Tensor,
                     kv) -> None:
        """`decoder_layer` for the rows of `h` after the positions `kv` (a `GrowingBuffers`)
        holds: room made for them first, counted as held after."""
        past, rows = kv.get_seq_length(), h.shape[1]
        kv.grow_to(past + rows)
        self.decoder_layer(h, layer, cos, sin, kv, past)
        kv.extend(rows)

    @staticmethod
    def attention_fits(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
        """`row_attention` handles these: batch 1, float32 on the CPU, few query rows, head
        dimension a multiple of 8, whole groups of query heads per key head, rows of the cache
        contiguous (a `GrowingCache` view or a plain tensor)."""
        return (query.shape[0] == 1 and query.shape[2] <= MAX_ATTENTION_ROWS
                and query.dtype == key.dtype == value.dtype == torch.float32
                and query.device.type == "cpu" and query.shape[-1] % 8 == 0
                and key.shape[-1] == value.shape[-1] == query.shape[-1]
                and query.shape[1] % key.shape[1] == 0 and key.shape[2] >= query.shape[2]
                and all(t.stride(-1) == 1 and t.stride(-2) == t.shape[-1] for t in (key, value)))

    def row_attention(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      scale: float) -> torch.Tensor:
        """Causal attention of the last Q positions: query [1, H, Q, D] over key/value
        [1, Hkv, L, D] (float32, or float16 both; the Q queries are positions L-Q .. L-1); the
        output [1, Q, H, D]."""
        if query.dim() != 4 or query.shape[0] != 1:
            raise boundary.KernelArgumentError(
                "row_attention", "query", f"must have shape [1, H, Q, D], not {list(query.shape)}"
            )
        _, h, q_len, d = query.shape
        q = query[0].contiguous()
        out = torch.empty((1, q_len, h, d), dtype=torch.float32)
        threads = torch.get_num_threads()
        boundary.check_row_attention(q, key, value, out)
        boundary.check_threads("row_attention", threads)
        h_kv, length = key.shape[1], key.shape[2]
        self._attention(q.data_ptr(), key.data_ptr(), value.data_ptr(), out.data_ptr(),
                        h, h_kv, q_len, length, d, key.stride(1), value.stride(1), float(scale),
                        int(key.dtype is torch.float16), threads)
        return out


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


def _attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                       scaling: float | None = None, **kwargs):
    """transformers' attention interface: `row_attention` for short causal passes, SDPA else."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kernels = _registered_kernels
    if (kernels is not None and dropout == 0.0 and kwargs.get("sliding_window") is None
            and kwargs.get("softcap") is None and getattr(module, "is_causal", True)
            and kernels.attention_fits(query, key, value)):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return kernels.row_attention(query, key, value, scale), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                  scaling=scaling, **kwargs)


_registered_kernels: DecodeKernels | None = None


def use_row_attention(model: torch.nn.Module) -> bool:
    """Route `model`'s attention through `row_attention` for short passes (a CPU float32 model
    using SDPA); True when it now does."""
    global _registered_kernels
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", False):
        return False
    kernels = load()
    if kernels is None:
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    _registered_kernels = kernels
    AttentionInterface.register(ATTENTION_NAME, _attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)
    model.set_attn_implementation(ATTENTION_NAME)
    return True
