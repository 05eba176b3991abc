"""What every call into the C kernels must satisfy, checked before the call.

The kernels (`decode_kernels.c`) take raw pointers through ctypes: a tensor of another dtype,
shape or memory layout than the one they assume would be read or written out of bounds
without a word. `DecodeKernels` runs these checks before each call; each raises
`KernelArgumentError` naming the kernel, the argument and what it must be. A check is a few
attribute reads per tensor, a few microseconds a call against ~0.1-0.7 ms of arithmetic; a
decoder layer's constant arguments (norms, projections, sizes) are checked once, when its
`LayerWeights` are made, and each call checks that they are still those tensors.

What the C code assumes (and so what is checked): float32 activations and float16 weights
(or `BlockMatrix` blocks: uint8 rows of whole blocks of a format it reads) on the CPU, in C
order where the code walks them as flat arrays; sizes that fit its `int` arguments (the
threads too: each check takes the call's count); reduction dimensions a multiple of 8 (its
8-wide loads; of the block's values for block formats); row ids of a de-quantization within
the matrix; key and value rows of `head_dim` contiguous elements, float32 or float16 (`KV_DTYPES`; keys and values of one type,
which the call passes as a flag), each head's rows at one stride; and room in the KV cache
buffers for every position the layer writes.
"""

from __future__ import annotations

import torch

from .block_weights import BLOCK_FORMATS, BlockMatrix

INT_MAX = 2**31 - 1
KV_DTYPES = (torch.float32, torch.float16)  # what a KV cache may hold (float16: converted when read)


class KernelArgumentError(ValueError):
    """An argument that the kernel `kernel` can't take: `argument` is not what it must be."""

    def __init__(self, kernel: str, argument: str, problem: str) -> None:
        super().__init__(f"{kernel}: {argument} {problem}")
        self.kernel = kernel
        self.argument = argument
        self.problem = problem


def _tensor(kernel: str, name: str, t, dtype: torch.dtype, shape: tuple, contiguous: bool = True) -> None:
    """`t` is a CPU tensor of `dtype` with `shape` (None: any size there), C-ordered if
    `contiguous`. (The test that passes is a few hundred nanoseconds; the message is built
    only for a refusal.)"""
    if (isinstance(t, torch.Tensor) and t.dtype is dtype and t.is_cpu and _shape_is(t.shape, shape)
            and (not contiguous or t.is_contiguous())):
        return
    if not isinstance(t, torch.Tensor):
        raise KernelArgumentError(kernel, name, f"must be a tensor, not {type(t).__name__}")
    if not t.is_cpu:
        raise KernelArgumentError(kernel, name, f"must be on the CPU, not {t.device}")
    if t.dtype is not dtype:
        raise KernelArgumentError(kernel, name, f"must be {dtype}, not {t.dtype}")
    if not _shape_is(t.shape, shape):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise KernelArgumentError(kernel, name, f"must have shape {want}, not {list(t.shape)}")
    raise KernelArgumentError(kernel, name, "must be contiguous (C order)")


def _shape_is(have, want: tuple) -> bool:
    if len(have) != len(want):
        return False
    for h, w in zip(have, want):
        if w is not None and h != w:
            return False
    return True


def _size(kernel: str, name: str, value: int, multiple: int = 1, minimum: int = 1) -> None:
    if not minimum <= value <= INT_MAX:
        raise KernelArgumentError(kernel, name, f"must be between {minimum} and {INT_MAX}, not {value}")
    if value % multiple:
        raise KernelArgumentError(kernel, name, f"must be a multiple of {multiple}, not {value}")


def _kv_dtype(kernel: str, name: str, t, dtype: torch.dtype | None) -> torch.dtype:
    """A cache's element type: `dtype` where given (the keys' for the values), else one of
    `KV_DTYPES`."""
    have = t.dtype if isinstance(t, torch.Tensor) else None
    if dtype is None and have in KV_DTYPES:
        return have
    if dtype is not None and have is dtype:
        return dtype
    want = dtype or " or ".join(str(d) for d in KV_DTYPES)
    raise KernelArgumentError(kernel, name, f"must hold {want}, not {have or type(t).__name__}")


def _rows_of_cache(kernel: str, name: str, t: torch.Tensor, kv_heads: int, head_dim: int,
                   dtype: torch.dtype | None = None) -> torch.dtype:
    """Key or value rows [1, kv_heads, L, head_dim] of float32 or float16 (`dtype` where given):
    each row `head_dim` contiguous elements, a head's rows one after another (any stride between
    heads). Their element type."""
    dtype = _kv_dtype(kernel, name, t, dtype)
    _tensor(kernel, name, t, dtype, (1, kv_heads, None, head_dim), contiguous=False)
    strides = t.stride()
    if strides[3] != 1 or strides[2] != head_dim:
        raise KernelArgumentError(kernel, name, f"must hold rows of {head_dim} contiguous elements, strides {strides}")
    return dtype


def check_half_matmul(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, threads: int) -> None:
    """y [M, N] = x [M, K] @ w [N, K].T: float32 x and y, float16 w, K a multiple of 8."""
    k = "half_matmul"
    _size(k, "threads", threads)
    _tensor(k, "x", x, torch.float32, (None, None))
    m, kk = x.shape
    _tensor(k, "w", w, torch.float16, (None, kk))
    n = w.shape[0]
    _tensor(k, "y", y, torch.float32, (m, n))
    _size(k, "rows", m)
    _size(k, "outputs", n)
    _size(k, "the reduced dimension", kk, multiple=8)


def check_block_matmul(x: torch.Tensor, w, y: torch.Tensor, threads: int) -> None:
    """y [M, N] = x [M, K] @ w.T for a `BlockMatrix` w [N, K]: float32 x and y; w's blocks
    as `BlockMatrix.of` checks them (still so: the blocks tensor is immutable only by use)."""
    k = "weights_matmul"
    _size(k, "threads", threads)
    _tensor(k, "x", x, torch.float32, (None, None))
    m, kk = x.shape
    if not isinstance(w, BlockMatrix) or w.cols != kk:
        have = f"{w.cols}" if isinstance(w, BlockMatrix) else type(w).__name__
        raise KernelArgumentError(k, "w", f"must be a BlockMatrix with rows of {kk} values (x's), not {have}")
    _block_matrix(k, "w", w)
    _tensor(k, "y", y, torch.float32, (m, w.rows))
    _size(k, "rows", m)
    _size(k, "outputs", w.rows)
    _size(k, "the reduced dimension", kk, multiple=max(8, w.format.block_values))


def check_keep(kernel: str, keep: torch.Tensor, outputs: int) -> None:
    """A product's wanted outputs: a contiguous CPU bool tensor [outputs] (one byte each, 0 or 1)."""
    _tensor(kernel, "keep", keep, torch.bool, (outputs,))


def _block_matrix(kernel: str, name: str, w: BlockMatrix, shape: tuple | None = None) -> None:
    """`w`'s blocks are a C-ordered uint8 tensor [rows, cols / block values * block bytes] of a
    format the kernels read (and w has `shape`)."""
    if shape is not None and w.shape != shape:
        raise KernelArgumentError(kernel, name, f"must have shape {list(shape)}, not {list(w.shape)}")
    if w.format not in BLOCK_FORMATS or w.cols <= 0 or w.cols % w.format.block_values:
        raise KernelArgumentError(kernel, name, f"must hold rows of whole blocks of a block format, not {w.format!r}")
    _tensor(kernel, f"{name} blocks", w.blocks, torch.uint8,
            (w.rows, w.cols // w.format.block_values * w.format.block_bytes))
    _size(kernel, f"{name} rows", w.rows, minimum=0)
    _size(kernel, f"{name} columns", w.cols)


def check_dequantize(w, ids, threads: int) -> None:
    """`dequantize_matrix`: a `BlockMatrix` as `BlockMatrix.of` checks it, and row ids an int64
    C-ordered [n] tensor of indices in [0, rows) (or None: every row)."""
    k = "dequantize_matrix"
    _size(k, "threads", threads)
    if not isinstance(w, BlockMatrix):
        raise KernelArgumentError(k, "w", f"must be a BlockMatrix, not {type(w).__name__}")
    _block_matrix(k, "w", w)
    if ids is None:
        return
    _tensor(k, "ids", ids, torch.int64, (None,))
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= w.rows):
        raise KernelArgumentError(k, "ids", f"must be in [0, {w.rows}), not {int(ids.min())}..{int(ids.max())}")


def check_activations(x, block: int = 32) -> None:
    """`quantize_activations` (block 32) and `quantize_activations_k` (block 256): float32
    x [M, K], K a multiple of `block`."""
    k = "quantize_activations" if block == 32 else "quantize_activations_k"
    _tensor(k, "x", x, torch.float32, (None, None))
    _size(k, "rows", x.shape[0])
    _size(k, "the row length", x.shape[1], multiple=block)
    _size(k, "the quantized rows' bytes", 4 * x.shape[0] * x.shape[1])


def check_row_attention(q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, out: torch.Tensor,
                        threads: int) -> None:
    """q [H, Q, D] contiguous; key and value rows [1, Hkv, L, D] (`_rows_of_cache`, one element
    type) with Q <= L; out [1, Q, H, D]; H a multiple of Hkv, D of 8."""
    k = "row_attention"
    _size(k, "threads", threads)
    _tensor(k, "query", q, torch.float32, (None, None, None))
    heads, q_len, head_dim = q.shape
    if key.dim() != 4:
        raise KernelArgumentError(k, "key", f"must have 4 dimensions, not {key.dim()}")
    kv_heads, length = key.shape[1], key.shape[2]
    dtype = _rows_of_cache(k, "key", key, kv_heads, head_dim)
    _rows_of_cache(k, "value", value, kv_heads, head_dim, dtype)
    if value.shape[2] != length:
        raise KernelArgumentError(
            k, "value", f"must hold as many positions as the keys ({length}), not {value.shape[2]}"
        )
    _tensor(k, "out", out, torch.float32, (1, q_len, heads, head_dim))
    _size(k, "head_dim", head_dim, multiple=8)
    _size(k, "kv_heads", kv_heads)
    if heads % kv_heads:
        raise KernelArgumentError(k, "query", f"heads ({heads}) must be a multiple of the key heads ({kv_heads})")
    _size(k, "query rows", q_len)
    if length < q_len:
        raise KernelArgumentError(k, "key", f"must hold at least the {q_len} query positions, not {length}")
    _size(k, "positions", length)


def check_layer_weights(tensors: dict, heads: int, kv_heads: int, head_dim: int, ffn: int, kinds, window: int,
                        table: int) -> None:
    """A decoder layer's constant arguments (`library.LAYER_TENSORS` by name, None where the
    layer has none): the norms [E] float32 (their biases [E] where the norm is LayerNorm,
    kinds[0] = 1); the projections q [H*D, E], k and v [Hkv*D, E], o [E, H*D], gate and up
    [F, E], down [E, F], float16 or `BlockMatrix`es (gate None only in a plain MLP, kinds[1] =
    2); biases float32 of their projection's rows; q/k norms [D]; output norms [E]. E, D and F
    multiples of 8, H of Hkv; kinds known; window and table at least 0. (Checked once, when the
    layer's `LayerWeights` are made.)"""
    k = "decoder_layer"
    _size(k, "head_dim", head_dim, multiple=8)
    _size(k, "heads", heads)
    _size(k, "kv_heads", kv_heads)
    _size(k, "intermediate size", ffn, multiple=8)
    if heads % kv_heads:
        raise KernelArgumentError(k, "heads", f"({heads}) must be a multiple of the key heads ({kv_heads})")
    norm, mlp, rotary = (int(x) for x in kinds)
    if norm not in (0, 1) or mlp not in (0, 1, 2) or rotary not in (0, 1):
        raise KernelArgumentError(k, "kinds", f"(norm, MLP, rotary) {tuple(kinds)} are not kinds the kernel knows")
    if window < 0 or table < 0:
        raise KernelArgumentError(k, "window", f"and table must be at least 0, not {window} and {table}")
    _tensor(k, "input norm", tensors["attn_norm"], torch.float32, (None,))
    e = tensors["attn_norm"].shape[0]
    _size(k, "hidden size", e, multiple=8)
    qd, kd = heads * head_dim, kv_heads * head_dim
    shapes = {
        "q": (qd, e), "k": (kd, e), "v": (kd, e), "o": (e, qd), "gate": (ffn, e), "up": (ffn, e), "down": (e, ffn),
    }
    for name, shape in shapes.items():
        w = tensors[name]
        if w is None and name == "gate" and mlp == 2:
            continue
        if isinstance(w, BlockMatrix):
            _block_matrix(k, f"{name} projection", w, shape)
        else:
            _tensor(k, f"{name} projection", w, torch.float16, shape)
    if tensors["gate"] is not None and mlp == 2:
        raise KernelArgumentError(k, "gate projection", "must be None in a plain (ungated) MLP")
    vectors = {"ffn_norm": e, "attn_norm_bias": e, "ffn_norm_bias": e, "q_bias": qd, "k_bias": kd, "v_bias": kd,
               "o_bias": e, "up_bias": ffn, "down_bias": e, "q_norm": head_dim, "k_norm": head_dim,
               "attn_post_norm": e, "ffn_post_norm": e}
    required = {"ffn_norm"} | ({"attn_norm_bias", "ffn_norm_bias"} if norm == 1 else set())
    for name, n in vectors.items():
        t = tensors[name]
        if t is None and name in required:
            raise KernelArgumentError(k, name, "is required here")
        if t is not None:
            _tensor(k, "post-attention norm" if name == "ffn_norm" else name.replace("_", " "), t, torch.float32, (n,))
    if (tensors["q_norm"] is None) != (tensors["k_norm"] is None):
        raise KernelArgumentError(k, "q/k norms", "must be both given or neither")


def _rows_call(k: str, h: torch.Tensor, hidden: int, head_dim: int, table: int, cos: torch.Tensor,
               sin: torch.Tensor) -> int:
    """h [1, Q, E]; cos and sin [T, Q, D], T above the highest `table` a layer reads; Q."""
    _tensor(k, "hidden states", h, torch.float32, (1, None, hidden))
    q_len = h.shape[1]
    _size(k, "rows", q_len)
    _tensor(k, "cos", cos, torch.float32, (None, q_len, head_dim))
    _tensor(k, "sin", sin, torch.float32, tuple(cos.shape))
    if cos.shape[0] <= table:
        raise KernelArgumentError(k, "cos", f"holds {cos.shape[0]} rotary tables, and a layer reads table {table}")
    return q_len


def _room(k: str, past: int, q_len: int, buffers) -> None:
    """Every (name, buffer, capacity) has room for positions past .. past+Q-1."""
    if past < 0:
        raise KernelArgumentError(k, "past", f"must be at least 0, not {past}")
    for name, capacity in buffers:
        if capacity < past + q_len:
            raise KernelArgumentError(
                k, name, f"has room for {capacity} positions, not the {past + q_len} it must hold"
            )
    _size(k, "positions", past + q_len)


def check_layer_call(h: torch.Tensor, hidden: int, kv_heads: int, head_dim: int, table: int, cos: torch.Tensor,
                     sin: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, past: int, threads: int) -> None:
    """What changes from call to call: h [1, Q, E]; cos and sin [T, Q, D]; key and value
    buffers [1, Hkv, capacity, D] (`_rows_of_cache`, one element type and one head stride for
    both) with room for positions past .. past+Q-1."""
    k = "decoder_layer"
    _size(k, "threads", threads)
    q_len = _rows_call(k, h, hidden, head_dim, table, cos, sin)
    dtype = _rows_of_cache(k, "key buffer", k_buf, kv_heads, head_dim)
    _rows_of_cache(k, "value buffer", v_buf, kv_heads, head_dim, dtype)
    k_stride, v_stride = k_buf.stride()[1], v_buf.stride()[1]
    if k_stride != v_stride:
        raise KernelArgumentError(
            k, "value buffer", f"must have the key buffer's head stride {k_stride}, not {v_stride}"
        )
    _room(k, past, q_len, (("key buffer", k_buf.shape[2]), ("value buffer", v_buf.shape[2])))


def check_layers_call(h: torch.Tensor, hidden: int, layers: int, kv_heads: int, head_dim: int, table: int,
                      cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, past: int,
                      threads: int) -> None:
    """`decoder_layers`: h [1, Q, E]; cos and sin [T, Q, D]; every layer's keys and values in
    two C-ordered tensors [layers, Hkv, capacity, D] of one element type (`KV_DTYPES`) and one
    shape, with room for positions past .. past+Q-1."""
    k = "decoder_layers"
    _size(k, "threads", threads)
    q_len = _rows_call(k, h, hidden, head_dim, table, cos, sin)
    dtype = _kv_dtype(k, "keys", keys, None)
    _tensor(k, "keys", keys, dtype, (layers, kv_heads, None, head_dim))
    _kv_dtype(k, "values", values, dtype)
    _tensor(k, "values", values, dtype, tuple(keys.shape))
    _room(k, past, q_len, (("keys", keys.shape[2]),))
