"""Every storage format the kernels read (`block_weights.WeightFormat`: F32, BF16, Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; F16 through `half_matmul`), against gguf's numpy code as the
reference, in every build this machine runs (the `kernels` fixture: avx512, avx2, portable; and
under AddressSanitizer, see test_kernels.py):

- de-quantization is gguf's `dequantize` bit for bit (random bytes: every bit pattern);
- short products (at most `INT8_ROWS` rows, the int8 path; K-quants: any number of rows) are
  the float64 product of gguf's values within the bound that the rows' int8 rounding allows,
  the legacy formats' long ones within float32's rounding; each row's bits are the same
  whatever the number of rows;
- the int8 products are the same bits in the avx2 and avx512 builds;
- a decoder layer whose projections mix formats as a Q4_K_M file does;
- wrong sizes, types and row ids are refused.

Legacy blocks are quantized by `gguf.quants.quantize`; gguf has no K-quant quantizer, so
K-quant blocks are random bytes with float16 scales in [1e-3, 1e-2] (`random_blocks`).

The bound of a short product: each row is quantized in units of 32 values to da * a, a =
round(x / da) with da = max|x_unit| / 127, so |x - da * a| <= da / 2 (plus float32 rounding
of x / da: da * 1e-4 covers it); an output y_n = sum_k x_k w_nk then moves by at most
sum over units of da_u (0.5 + 1e-4) sum_{k in u} |w_nk|, and the float32 arithmetic of the
scales by at most 4e-6 sum_k |x_k w_nk| (K / 64 + 4 rounding steps of 6e-8 per lane, K <= 1024
here).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from kernel_support import kernels_of, random_blocks

from lsp_server.model.kernels import boundary, build, library
from lsp_server.model.kernels.block_weights import BlockFormatError, BlockMatrix, WeightFormat

FORMATS = [f.name for f in WeightFormat if f is not WeightFormat.F16]
QUANTIZED = [f.name for f in WeightFormat if f.quantized]
KQUANTS = ("Q4_K", "Q5_K", "Q6_K")


@pytest.fixture(params=list(build.ISAS))
def kernels(request) -> library.DecodeKernels:
    """Each build of the kernels this machine runs, in turn."""
    return kernels_of(request.param)


def matrix(name: str, rows: int, cols: int, seed: int = 0, kquant_scales=(1e-3, 1e-2)) -> tuple[BlockMatrix,
                                                                                                   torch.Tensor]:
    """A `BlockMatrix` of format `name` [rows, cols] and gguf's de-quantized values of it
    (legacy formats: quantized normal values of deviation 0.05; K-quants: random blocks with d
    and dmin in `kquant_scales`)."""
    rng = np.random.default_rng(seed)
    fmt = WeightFormat[name]
    if name in KQUANTS:
        raw = random_blocks(fmt, rows, cols, rng, scales=kquant_scales)
    else:
        values = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        raw = values.view(np.uint8) if name == "F32" else quants.quantize(values, GGMLQuantizationType[name])
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(rows, -1)
    return BlockMatrix.of(torch.from_numpy(raw.copy()), fmt, cols), ggufs_values(raw, name, cols)


def ggufs_values(raw: np.ndarray, name: str, cols: int) -> torch.Tensor:
    if name == "F32":
        return torch.from_numpy(raw.view(np.float32).reshape(-1, cols).copy())
    return torch.from_numpy(quants.dequantize(raw, GGMLQuantizationType[name]).reshape(-1, cols).copy())


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, NaN for NaN (a NaN's payload is not compared)."""
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32))


@pytest.mark.parametrize("name", FORMATS)
def test_dequantize_is_ggufs_bit_for_bit(kernels, name):
    """Every bit pattern (random bytes: subnormal, infinite and NaN scales too), every row or
    rows by id, in every build: gguf's numpy values."""
    fmt = WeightFormat[name]
    cols = 512
    raw = np.random.default_rng(1).integers(0, 256, (23, cols // fmt.block_values * fmt.block_bytes), dtype=np.uint8)
    w = BlockMatrix.of(torch.from_numpy(raw), fmt, cols)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 in gguf's code
        theirs = ggufs_values(raw, name, cols)
    assert same_bits(kernels.dequantize(w), theirs)
    ids = torch.tensor([22, 0, 5, 5])
    assert same_bits(kernels.dequantize(w, ids), theirs[ids])
    sane, values = matrix(name, 23, cols, seed=2)  # and values a model has
    assert torch.equal(kernels.dequantize(sane), values)
    assert kernels.dequantize(sane, torch.tensor([], dtype=torch.int64)).shape == (0, cols)


def test_embedding_lookups_are_ggufs_rows(kernels):
    """`BlockMatrix.embedding` / `dequantize(ids)`: any shape of ids, negative ones from the end;
    by the kernels, and the same values without them (gguf's numpy code, where they can't be built)."""
    w, values = matrix("Q6_K", 300, 256)
    ids = torch.tensor([[4, 0, 299], [-1, 7, 4]])
    got = w.embedding(ids, kernels)
    assert got.shape == (2, 3, 256) and torch.equal(got, values[ids])
    assert torch.equal(w.dequantize(kernels=kernels), values)
    assert torch.equal(w.embedding(ids), values[ids]) and torch.equal(w.dequantize(), values)
    with pytest.raises(IndexError, match=r"in \[-300, 300\)"):
        w.dequantize(torch.tensor([300]))


def bound(x: torch.Tensor, w: torch.Tensor, unit: int = 32) -> torch.Tensor:
    """The largest difference the int8 path may make to x @ w.T [M, N] (the module's doc), the
    rows quantized in units of `unit` values (K-quants: 256)."""
    m, k = x.shape
    da = x.reshape(m, k // unit, unit).abs().amax(-1).double() / 127  # [M, units]
    wsum = w.reshape(w.shape[0], k // unit, unit).abs().sum(-1).double()  # [N, units]
    return (0.5 + 1e-4) * da @ wsum.t() + 4e-6 * x.double().abs() @ w.double().abs().t()


@pytest.mark.parametrize("name", FORMATS)
def test_products_are_the_float64_product_of_ggufs_values_within_their_rounding(kernels, name):
    """Short products (1-9 rows: the int8 path for quantized formats) within `bound`, each row
    the same bits alone as among others; long ones (40 rows) within float32's rounding, but
    for the K-quants, whose long products take the int8 path too: the short ones' bits."""
    k = 768 if name in KQUANTS else 96 * 5  # K-quants: 3 super-blocks; legacy: an odd number of units
    w, values = matrix(name, 45, k, seed=3)
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(4))
    x[3] *= 50  # a row of another scale
    ref = x.double() @ values.double().t()
    float_tol = 4e-6 * x.double().abs() @ values.double().abs().t()
    y = kernels.matmul(x, w)
    short = kernels.matmul(x[:9], w)
    if name in KQUANTS:  # 40 rows > INT8_ROWS: the int8 path still, the same bits row by row
        assert torch.equal(y[:9], short) and (y.double() - ref).abs().le(bound(x, values, 256)).all()
    else:
        assert ((y.double() - ref).abs() <= float_tol).all()  # the weights' exact values
    err, tol = (short.double() - ref[:9]).abs(), bound(x[:9], values, 256 if name in KQUANTS else 32)
    assert (err <= tol).all(), float((err - tol).max())
    if WeightFormat[name].quantized:
        assert (err > float_tol[:9]).any()  # the int8 path, not the float one
        terms = x[:9].double().abs() @ values.double().abs().t()
        assert (tol <= 0.02 * terms).all()  # a bound that says something: 2% of sum |x w| at most
    for m in range(1, 10):
        assert torch.equal(kernels.matmul(x[:m], w), short[:m]), m
        assert torch.equal(kernels.matmul(x[m - 1 : m], w)[0], short[m - 1]), m
    assert torch.equal(kernels.matmul(x[2:7], w), short[2:7])


@pytest.mark.parametrize("name", FORMATS + ["F16"])
def test_a_product_computes_the_outputs_it_is_asked_for_and_no_others(kernels, name):
    """`keep`: the wanted outputs are the bits of the whole product (short and long), the
    others -inf (a vocabulary projection under the grammar's mask); a wrong `keep` is refused."""
    k = 768 if name in KQUANTS else 96 * 5
    if name == "F16":
        w = (torch.randn(70, k, generator=torch.Generator().manual_seed(5)) * 0.05).half()
    else:
        w, _ = matrix(name, 70, k, seed=5)
    x = torch.randn(12, k, generator=torch.Generator().manual_seed(6))
    keep = torch.zeros(70, dtype=torch.bool)
    keep[[0, 3, 4, 17, 31, 32, 33, 50, 69]] = True
    for m in (1, 3, 9, 12):  # the int8 path, and past it
        whole = kernels.matmul(x[:m], w)
        part = kernels.matmul(x[:m], w, keep)
        assert same_bits(part[:, keep], whole[:, keep]), m
        assert torch.isneginf(part[:, ~keep]).all(), m
    assert torch.isneginf(kernels.matmul(x[:2], w, torch.zeros(70, dtype=torch.bool))).all()
    for wrong in (keep[:69], keep.to(torch.uint8), keep.reshape(1, 70)):
        with pytest.raises(boundary.KernelArgumentError, match="keep"):
            kernels.matmul(x[:2], w, wrong)


@pytest.mark.parametrize("name", QUANTIZED)
def test_the_int8_products_are_the_same_bits_in_the_avx2_and_avx512_builds(name):
    """int8_products.h: the same integers and the same float operations in both x86 builds."""
    wide, narrow = kernels_of("avx512"), kernels_of("avx2")
    k = 512 if name in KQUANTS else 32 * 7
    w, _ = matrix(name, 33, k, seed=5)
    x = torch.randn(6, k, generator=torch.Generator().manual_seed(6))
    assert torch.equal(wide.matmul(x, w), narrow.matmul(x, w))


def test_rows_are_quantized_as_documented(kernels):
    """int8_products.h's row layout: codes round(x / da) (ties to even), da = max|x| / 127 per
    unit of 32, then per lane of 4 codes the negated sum, da, and da times the sum."""
    x = torch.randn(3, 96, generator=torch.Generator().manual_seed(7)) * torch.tensor([1.0, 1e-3, 40.0])[:, None]
    x[1, 32:64] = 0  # a unit of zeros: da 0, codes 0
    x[2, 5] = 0.5 * float(x[2, :32].abs().max()) / 127 * 2 * 3  # an exact tie or near it: rounded as torch does
    got = kernels.quantize_activations(x)
    k = 96
    codes = got[:, :k].view(torch.int8)
    rest = got[:, k:].contiguous()
    nls, dal, lsd = rest[:, :k].view(torch.int32), rest[:, k : 2 * k].view(torch.float32), rest[:, 2 * k :].view(torch.float32)
    da = x.reshape(3, 3, 32).abs().amax(-1) / 127
    inv = torch.where(da == 0, torch.zeros_like(da), 1 / da)
    want = torch.round(x.reshape(3, 3, 32) * inv[..., None]).clamp(-127, 127).to(torch.int8).reshape(3, k)
    assert torch.equal(codes, want)
    sums = want.reshape(3, k // 4, 4).sum(-1, dtype=torch.int32)
    assert torch.equal(nls, -sums)
    assert torch.equal(dal, da.repeat_interleave(8, dim=1))
    assert torch.equal(lsd, dal * sums.float())


def test_rows_are_quantized_for_the_k_quants_as_documented(kernels):
    """kquant_products.h's row layout: codes round(x / dx) (ties to even), dx = max|x| / 127 per
    block of 256 (llama.cpp's q8_K), then the blocks' dx and the int16 sums of every 16 codes."""
    x = torch.randn(3, 768, generator=torch.Generator().manual_seed(17)) * torch.tensor([1.0, 1e-3, 40.0])[:, None]
    x[1, 256:512] = 0  # a block of zeros: dx 0, codes 0
    x[2, 7] = 0.5 * float(x[2, :256].abs().max()) / 127 * 2 * 3  # a tie or near it: rounded as torch does
    x[0, 600] = float("nan")  # a block with a NaN: its dx NaN (the outputs NaN), codes 0
    got = kernels.quantize_activations_k(x)
    k = 768
    codes = got[:, :k].view(torch.int8)
    dx = got[:, k : k + 12].contiguous().view(torch.float32)
    bsums = got[:, k + 12 :].contiguous().view(torch.int16)
    blocks = x.reshape(3, 3, 256)
    want_dx = blocks.abs().amax(-1) / 127
    assert torch.equal(dx[:, :2], want_dx[:, :2]) and torch.equal(dx[1:, 2], want_dx[1:, 2]) and dx[0, 2].isnan()
    inv = torch.where(want_dx == 0, torch.zeros_like(want_dx), 1 / want_dx)
    want = torch.round(blocks * inv[..., None]).clamp(-127, 127).nan_to_num(0).to(torch.int8).reshape(3, k)
    want[0, 512:] = 0
    assert torch.equal(codes, want)
    assert torch.equal(bsums, want.reshape(3, k // 16, 16).sum(-1, dtype=torch.int16))


# a Q4_K_M file's mix (Gemma 3, Qwen2.5-Coder): Q4_K and Q6_K, with Q5_0 and Q8_0 where a row is
# not whole super-blocks; and a layer of the other formats
LAYER_FORMATS = [
    ["Q4_K", "Q5_0", "Q8_0", "Q6_K", "Q4_K", "Q5_0", "Q6_K"],
    ["Q8_0", "Q5_1", "Q4_1", "Q4_0", "Q5_K", "BF16", "F32"],
    ["Q6_K", "Q4_K", "Q5_0", "Q4_K", "Q6_K", "Q8_0", "Q4_K"],
]


def _layer_weights(kernels, formats, seed):
    """The `layer_weights` of a small layer (E 256, 4 heads of 64, 2 key heads, F 512) whose
    projections are in `formats` (and the float16 copy of its values)."""
    e, heads, kv_heads, d, ffn = 256, 4, 2, 64, 512
    shapes = [(heads * d, e), (kv_heads * d, e), (kv_heads * d, e), (e, heads * d), (ffn, e), (ffn, e), (e, ffn)]
    blocks, half = [], []
    for j, (name, (n, k)) in enumerate(zip(formats, shapes)):
        w, values = matrix(name, n, k, seed=100 * seed + j, kquant_scales=(1e-4, 4e-4))  # deviations ~0.05
        blocks.append(w)
        half.append(values.half())
    gen = torch.Generator().manual_seed(seed)
    const = dict(in_norm=1 + 0.1 * torch.randn(e, generator=gen), post_norm=1 + 0.1 * torch.randn(e, generator=gen),
                 eps=1e-5, heads=heads, kv_heads=kv_heads, head_dim=d, ffn=ffn, scale=d ** -0.5)
    return kernels.layer_weights(weights=blocks, **const), kernels.layer_weights(weights=half, **const)


def test_a_layer_mixing_formats_as_a_q4_k_m_file_does(kernels):
    """`decoder_layers` over layers whose projections mix every format: the bits of
    `decoder_layer` layer by layer, a row alone the bits it gets among others, and close to the
    same layers with float16 copies of the values (the int8 products' rounding, float16's)."""
    from lsp_server.model.kv_cache import CpuCache

    pairs = [_layer_weights(kernels, f, seed=i) for i, f in enumerate(LAYER_FORMATS)]
    gen = torch.Generator().manual_seed(8)
    h0 = torch.randn(1, 3, 256, generator=gen)
    cos, sin = torch.cos(torch.randn(1, 3, 64, generator=gen)), torch.sin(torch.randn(1, 3, 64, generator=gen))

    def cache():
        c = CpuCache(3, torch.float16, 2, 64)
        g = torch.Generator().manual_seed(9)
        with c.write(6) as (_, k, v):
            for i in range(3):
                k[i : i + 1, :, :6] = torch.randn(1, 2, 6, 64, generator=g)
                v[i : i + 1, :, :6] = torch.randn(1, 2, 6, 64, generator=g)
        return c

    def in_one_call(h, stack, cos, sin, c):
        with c.write(h.shape[1]) as (past, keys, values):
            kernels.decoder_layers(h, stack, cos, sin, keys, values, past)

    out = []
    for which in (0, 1):
        layers = [p[which] for p in pairs]
        one, each = cache(), cache()
        h1, h2 = h0.clone(), h0.clone()
        in_one_call(h1, kernels.layer_stack(layers), cos, sin, one)
        with each.write(3) as (past, keys, values):
            for i, layer in enumerate(layers):
                kernels.decoder_layer(h2, layer, cos, sin, keys[i : i + 1], values[i : i + 1], past)
        assert torch.equal(h1, h2) and torch.equal(one.k[:, :, :9], each.k[:, :, :9])
        out.append(h1)
    change = (out[0] - h0).norm() / (out[1] - h0).norm()  # what the layers added, int8 against float16
    # 0.035 here: the K-quant products' rows in blocks of 256 (llama.cpp's q8_K) move a layer's
    # output ~30% more than units of 32 did (0.023 against 0.017 for the first layer alone)
    assert abs(change - 1) < 0.1 and float((out[0] - out[1]).norm() / (out[1] - h0).norm()) < 0.04
    assert not torch.equal(out[0], out[1])
    stack, rows = kernels.layer_stack([p[0] for p in pairs]), cache()
    for i in range(3):
        h = h0[:, i : i + 1].clone()
        in_one_call(h, stack, cos[:, i : i + 1].contiguous(), sin[:, i : i + 1].contiguous(), rows)
        assert torch.equal(h[0, 0], out[0][0, i]), i


def _refused(call, argument: str) -> str:
    with pytest.raises(boundary.KernelArgumentError) as err:
        call()
    assert err.value.argument == argument, str(err.value)
    return str(err.value)


def test_what_the_formats_cannot_be_is_refused(kernels):
    """Types the kernels don't read, rows that are not whole blocks or super-blocks, wrong byte
    counts, row ids out of range, F32/BF16 rows the float tiles can't take."""
    w, _ = matrix("Q4_K", 4, 512)
    for kind in (GGMLQuantizationType.Q2_K, GGMLQuantizationType.IQ4_NL, "Q3_K", 16):
        with pytest.raises(BlockFormatError, match="is not one the kernels read"):
            BlockMatrix.of(w.blocks, kind, 512)
    assert BlockMatrix.of(w.blocks, GGMLQuantizationType.Q4_K, 512).format is WeightFormat.Q4_K  # gguf's enum
    with pytest.raises(BlockFormatError, match="multiple of 256 values, not 640"):
        BlockMatrix.of(w.blocks, WeightFormat.Q4_K, 640)
    with pytest.raises(BlockFormatError, match="Q6_K rows of 512 values take 420 bytes, not 288"):
        BlockMatrix.of(w.blocks, WeightFormat.Q6_K, 512)
    assert "must be in [0, 4)" in _refused(lambda: kernels.dequantize(w, torch.tensor([4])), "ids")
    assert "int64" in _refused(lambda: kernels.dequantize(w, torch.tensor([1], dtype=torch.int32)), "ids")
    assert "rows of 256 values (x's), not 512" in _refused(lambda: kernels.matmul(torch.randn(2, 256), w), "w")
    odd, _ = matrix("F32", 3, 12)
    assert not kernels.fits(odd) and kernels.fits(w)
    assert "multiple of 8" in _refused(lambda: kernels.matmul(torch.randn(2, 12), odd), "the reduced dimension")
    stale = BlockMatrix(w.blocks[:, :200], WeightFormat.Q4_K, 4, 512)  # made around `of`: still checked
    assert "[4, 288]" in _refused(lambda: kernels.matmul(torch.randn(1, 512), stale), "w blocks")
    assert "multiple of 32" in _refused(lambda: kernels.quantize_activations(torch.randn(2, 40)), "the row length")
