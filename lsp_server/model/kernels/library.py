"""The calls into the C kernels (`decode_kernels.c` with its headers; the shared library is
built and loaded by `build`), each checked first (`boundary`): dtype, shape, memory layout and
sizes, or a `KernelArgumentError`.

- `DecodeKernels.half_matmul(x, w)`: float32 rows times float16 weights (`half_weights`);
  `DecodeKernels.matmul(x, w)`: the same for float16 weights or a `block_weights.BlockMatrix`
  in any of its formats (GGUF's Q4_0 .. Q6_K blocks, F32, BF16): products of at most
  `INT8_ROWS` rows of quantized weights (decoding steps, verification passes), and every
  product of K-quant weights (prompts too), quantize each row to int8 and multiply in integers
  (llama.cpp's way), longer ones of the other formats (prompts) de-quantize the weights exactly
  to float32 inside the kernel;
- `DecodeKernels.dequantize(w, ids)`: rows of a `BlockMatrix` as float32, gguf's exact values;
- `DecodeKernels.row_attention(q, k, v, scale)`: causal attention of the last few positions
  over the KV cache (`fused_layers.use_row_attention(model)` routes a transformers model's
  attention through it for passes of at most `MAX_ATTENTION_ROWS` rows);
- `decoder_layer`: a whole decoder layer (any family `architectures` describes) for a few rows in one call;
  `fused_layers.use_fused_layers(model)` makes each decoder layer use it for such passes over a
  `GrowingCache`;
- `decoder_layers`: all the decoder layers of a short pass in one call and one parallel region
  (`cpu_decoder`'s decoding steps and verification passes over a `CpuCache`): ~40 µs of Python,
  checks and ctypes per layer were ~1.2 ms of a step.

The attention reads a float32 or a float16 KV cache (`kv_cache.KV_DTYPE`), converting float16
keys and values exactly when read.

Every product and layer gives a row the same bits whatever the number of rows in the pass, so a
speculative verification pass reproduces exactly what single decoding steps would have computed.
The float products sum in a different order in the avx512 build (`build.ISAS`) than in the other
two, so their bits differ between builds, never between the rows of one build; the int8 products
are the same operations in the avx2 and avx512 builds (the same bits).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace

import torch

from . import boundary
from .block_weights import BlockMatrix, WeightFormat

MAX_ATTENTION_ROWS = 32  # passes with more query rows (prompts) keep PyTorch's attention
INT8_ROWS = 32  # products of at most this many rows of quantized weights take the int8 path (the C's INT8_ROWS)
ISA_NUMBERS = {"avx512": 2, "avx2": 1, "portable": 0}  # what the library's `kernel_isa()` says of its build


def weight_storage(w) -> torch.Tensor:
    """The tensor a weight's pointer is taken from: a float16 matrix itself, a `BlockMatrix`'s blocks."""
    return w.blocks if isinstance(w, BlockMatrix) else w


def weight_format(w) -> WeightFormat:
    return w.format if isinstance(w, BlockMatrix) else WeightFormat.F16


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
        self._weights_matmul.argtypes = ([ctypes.c_void_p] * 2 + [ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int] * 4
                                         + [ctypes.c_void_p])
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

    def matmul(self, x: torch.Tensor, w, keep: torch.Tensor | None = None) -> torch.Tensor:
        """x @ w.T for float32 `x` [..., K] and `w` [N, K]: a float16 tensor (`half_matmul`) or
        a `BlockMatrix`. Quantized weights and at most `INT8_ROWS` rows (K-quant weights: any
        number of rows): each row quantized to
        int8 in units of 32 values, integer products, float scales (`int8_products.h`: within
        max|x_unit| / 254 * sum|w_unit| per unit of the float64 product); for K-quant weights in
        blocks of 256 values, the sub-block scales applied in integers (`kquant_products.h`:
        within max|x_block| / 254 * sum|w_block| per block of 256); else the weights' exact
        values multiplied as float16 ones are. Each row's result is the same whatever the
        number of rows, up to `INT8_ROWS`, and again above it.

        `keep` (bool [N]): the outputs wanted; the others are -inf, and the int8 path does not
        compute them (a vocabulary projection under the grammar's mask: the tokens it refuses
        cost nothing). A wanted output is the same whatever `keep` says of the others."""
        if not isinstance(w, BlockMatrix):
            y = self.half_matmul(x, w)
            if keep is not None:
                boundary.check_keep("half_matmul", keep, y.shape[-1])
                y.masked_fill_(~keep, float("-inf"))
            return y
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        m, k = x2.shape
        y = torch.empty((m, w.rows), dtype=torch.float32)
        threads = torch.get_num_threads()
        boundary.check_block_matmul(x2, w, y, threads)
        if keep is not None:
            boundary.check_keep("weights_matmul", keep, w.rows)
        if not self._weights_matmul(x2.data_ptr(), w.blocks.data_ptr(), int(w.format), y.data_ptr(), m, w.rows, k,
                                    threads, None if keep is None else keep.data_ptr()):
            raise MemoryError("weights_matmul: no memory for its de-quantized panels")
        return y.reshape(*lead, w.rows)

    def dequantize(self, w: BlockMatrix, ids: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` (int64 [n], each in [0, rows); all rows where None) of `w` as float32
        [n, cols]: gguf's de-quantized values, bit for bit."""
        threads = torch.get_num_threads()
        boundary.check_dequantize(w, ids, threads)
        n = w.rows if ids is None else ids.shape[0]
        out = torch.empty((n, w.cols), dtype=torch.float32)
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
        boundary.check_half_matmul(x2, w, y, threads)
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
                      k_buf: torch.Tensor, v_buf: torch.Tensor, past: int) -> None:
        """One decoder layer for the rows of `h` [1, Q, E] (updated in place: the residual
        stream); cos/sin [T, Q, head_dim], the pass's rotary tables; the new keys and values go
        to positions past .. past+Q-1 of the layer's buffers `k_buf`/`v_buf` [1, kv_heads,
        capacity, head_dim] (room made by the caller: `append_layer` does both for a
        `GrowingBuffers`)."""
        if not isinstance(layer, LayerWeights) or layer.pointers != layer.current_pointers():
            raise boundary.KernelArgumentError(
                "decoder_layer", "layer", "must be LayerWeights whose tensors are as checked"
            )
        threads = torch.get_num_threads()
        boundary.check_layer_call(h, layer.hidden, layer.kv_heads, layer.head_dim, layer.table, cos, sin, k_buf,
                                  v_buf, past, threads)
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

    def decoder_layers(self, h: torch.Tensor, stack: LayerStack, cos: torch.Tensor, sin: torch.Tensor,
                       keys: torch.Tensor, values: torch.Tensor, past: int) -> None:
        """Every layer of `stack` in turn for the rows of `h` [1, Q, E] (updated in place), in
        one call: the same bits as `decoder_layer` layer by layer; cos/sin [T, Q, head_dim], the
        pass's rotary tables. `keys`/`values`: every layer's buffers [layers, kv_heads, capacity,
        head_dim] (a `kv_cache.CpuCache`'s, in `CpuCache.write`), which get positions
        past .. past+Q-1."""
        if not isinstance(stack, LayerStack) or stack.current_pointers() != stack.pointers:
            raise boundary.KernelArgumentError(
                "decoder_layers", "stack", "must be a LayerStack whose tensors are as checked"
            )
        rows = h.shape[1] if h.dim() == 3 else 0
        w = stack.layers[0]
        threads = torch.get_num_threads()
        boundary.check_layers_call(h, w.hidden, len(stack.layers), w.kv_heads, w.head_dim,
                                   max(layer.table for layer in stack.layers), cos, sin, keys, values, past, threads)
        if not self._layers(h.data_ptr(), rows, h.shape[2], len(stack.layers), stack.array, stack.ints, stack.kinds,
                            w.eps, w.heads, w.kv_heads, w.head_dim, w.ffn, cos.data_ptr(), sin.data_ptr(),
                            keys.data_ptr(), values.data_ptr(), keys.stride(0), keys.stride(1), past, w.scale,
                            int(keys.dtype is torch.float16), threads):
            raise MemoryError("decoder_layers: no memory for its scratch buffers")

    def append_layer(self, h: torch.Tensor, layer: LayerWeights, cos: torch.Tensor, sin: torch.Tensor,
                     kv) -> None:
        """`decoder_layer` for the rows of `h` after the positions `kv` (a `GrowingBuffers`)
        holds: room made for them first, counted as held after."""
        past, rows = kv.get_seq_length(), h.shape[1]
        kv.grow_to(past + rows)
        self.decoder_layer(h, layer, cos, sin, kv._k, kv._v, past)
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
        boundary.check_row_attention(q, key, value, out, threads)
        h_kv, length = key.shape[1], key.shape[2]
        self._attention(q.data_ptr(), key.data_ptr(), value.data_ptr(), out.data_ptr(),
                        h, h_kv, q_len, length, d, key.stride(1), value.stride(1), float(scale),
                        int(key.dtype is torch.float16), threads)
        return out


