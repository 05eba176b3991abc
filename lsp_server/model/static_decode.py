"""Forward passes of fixed shape over a preallocated KV cache, replayed as CUDA graphs on CUDA.

transformers' forward with a growing cache gives every decoding step a new key length: the
attention backend plans a new kernel for every shape (on an H200, ~270 µs of host time per
call, 43 % of the wall time), and the ~390 kernels of a step are launched one by one from
Python. Here (the scheme of transformers' `StaticCache` and of vLLM/SGLang's graph runners):

- `StaticWorkspace`: the keys and values of every layer in one buffer of `capacity` positions,
  allocated once; new positions are written in place (`index_copy_` at the step's positions).
- `StaticDecoder.step_logits`: a Llama-family forward (Llama, Mistral, Qwen2, Qwen3: the model's own
  modules for norms, projections, rotary embedding and MLP) whose attention always reads all
  `capacity` positions under a mask built on the device from the start position: every shape
  depends only on the number of tokens fed, never on the context length. Grouped-query heads are
  folded into the query rows, so the cache is never repeated per head.
- `DecodeGraphs` (CUDA only): the one-token step and the verification passes of 2 … γ+1 tokens
  captured once as `torch.cuda.CUDAGraph`s sharing one memory pool, replayed with their inputs
  (token ids, start position) copied into static buffers: one launch per pass.
- `StaticKV`: one document's cache under this path (its length; its positions live in the
  workspace while it is the one decoded, and in a compact copy of its own otherwise), so
  `PromptCache` keeps documents as before.

On the CPU the same code runs eagerly (tests compare it with transformers' forward); the
product's CPU path stays our C kernels (`kernels/`), which are faster there.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .kv_cache import ForwardCancelled

if TYPE_CHECKING:  # transformers only where a context outgrows the static cache
    from .hf_cache import GrowingCache

log = logging.getLogger(__name__)

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DEFAULT_CAPACITY = 4096  # positions: a 1,024-token prompt budget, completions and drafts, with room
# the passes captured as graphs: a decoding step (1) and verifications of γ drafted tokens (γ + 1,
# γ up to speculation's MAX_GAMMA = 8; tests/test_static_decode.py checks they agree)
GRAPH_SIZES = tuple(range(1, 10))


class StaticUnsupported(ValueError):
    """The model is not one whose forward `StaticDecoder` reproduces; the message says why."""


class StaticKV:
    """A document's KV cache on the static path: `length` positions, in the workspace while it
    is resident, else in `saved` (keys and values of its positions only)."""

    def __init__(self, workspace: StaticWorkspace) -> None:
        self.workspace = workspace
        self.length = 0
        self.saved: tuple[torch.Tensor, torch.Tensor] | None = None

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """Drop positions from the end (a negative count, as transformers' caches take it)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of positions to remove")
        self.length = max(0, self.length + tokens_to_remove)

    @property
    def nbytes(self) -> int:
        """The memory its positions take (in the workspace or in its own copy)."""
        return self.length * self.workspace.bytes_per_position

    def to_growing(self) -> GrowingCache:
        """The same positions in a transformers cache (for a context past the capacity)."""
        from .hf_cache import GrowingCache

        ws = self.workspace
        ws.bind(self)
        cache = GrowingCache()
        for layer in range(ws.keys.shape[0]):
            cache.update(ws.keys[layer][..., : self.length, :].clone(), ws.values[layer][..., : self.length, :].clone(),
                         layer)
        return cache


class StaticWorkspace:
    """Every layer's keys and values for `capacity` positions, allocated once; the graphs read
    and write these buffers, so one document (`resident`) is held here at a time."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        shape = (layers, 1, kv_heads, capacity, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.capacity = capacity
        self.bytes_per_position = 2 * layers * kv_heads * head_dim * self.keys.element_size()
        self.resident: StaticKV | None = None

    def bind(self, kv: StaticKV) -> None:
        """Make `kv` the cache in the buffers: the resident one's positions are copied out to
        its own storage, `kv`'s copied in."""
        if self.resident is kv:
            return
        old = self.resident
        if old is not None:
            n = old.length
            old.saved = (self.keys[..., :n, :].clone(), self.values[..., :n, :].clone())
        if kv.saved is not None:
            k, v = kv.saved
            n = min(kv.length, k.shape[-2])
            self.keys[..., :n, :].copy_(k[..., :n, :])
            self.values[..., :n, :].copy_(v[..., :n, :])
            kv.saved = None
        self.resident = kv


class StaticDecoder:
    """Fixed-shape forward passes of a Llama-family model over a `StaticWorkspace`."""

    def __init__(self, model: torch.nn.Module, capacity: int = DEFAULT_CAPACITY) -> None:
        cfg = model.config
        kind = getattr(cfg, "model_type", None)
        if kind not in SUPPORTED_TYPES:
            raise StaticUnsupported(f"model type {kind!r} (the static path knows {', '.join(SUPPORTED_TYPES)})")
        if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", kind == "mistral"):
            raise StaticUnsupported("sliding-window attention")
        inner = model.model
        self.model = model
        self.layers = list(inner.layers)
        self.embed = inner.embed_tokens
        self.norm = inner.norm
        self.rotary = inner.rotary_emb
        self.rotate = sys.modules[type(self.layers[0].self_attn).__module__].apply_rotary_pos_emb
        attn = self.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.groups = self.heads // self.kv_heads
        self.scaling = float(attn.scaling)
        capacity = min(int(capacity), int(getattr(cfg, "max_position_embeddings", capacity) or capacity))
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.workspace = StaticWorkspace(len(self.layers), self.kv_heads, self.head_dim, capacity, self.dtype,
                                         self.device)
        self._positions = torch.arange(capacity, device=self.device)
        self.graphs: DecodeGraphs | None = None

    @property
    def capacity(self) -> int:
        return self.workspace.capacity

    def new_cache(self) -> StaticKV:
        return StaticKV(self.workspace)

    def step_logits(self, ids: torch.Tensor, start: torch.Tensor, keep: int,
                    cancel: Callable[[], bool] | None = None) -> torch.Tensor:
        """Logits (float32) of the last `keep` of the `n` tokens `ids` (1, n) fed at positions
        start … start+n-1 of the resident cache, whose positions they write. Every shape depends
        on n only (graph-capturable: no host synchronisation). `cancel()` is asked before each
        layer (eager calls only): ForwardCancelled leaves the cache's length as it was."""
        ws = self.workspace
        n = ids.shape[1]
        pos = start + self._positions[:n]
        h = self.embed(ids)
        cos, sin = self.rotary(h, pos[None])
        visible = self._positions[None, :] <= pos[:, None]  # (n, capacity): causal, up to each position
        mask = visible.repeat(self.groups, 1)[None, None]  # query rows are (group, token)
        for i, layer in enumerate(self.layers):
            if cancel is not None and cancel():
                raise ForwardCancelled()
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(1, n, self.heads, self.head_dim)
            k = attn.k_proj(x).view(1, n, self.kv_heads, self.head_dim)
            v = attn.v_proj(x).view(1, n, self.kv_heads, self.head_dim)
            if getattr(attn, "q_norm", None) is not None:  # Qwen3
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = self.rotate(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
            ws.keys[i].index_copy_(2, pos, k)
            ws.values[i].index_copy_(2, pos, v.transpose(1, 2))
            q = q.reshape(1, self.kv_heads, self.groups * n, self.head_dim)
            out = torch.nn.functional.scaled_dot_product_attention(q, ws.keys[i], ws.values[i], attn_mask=mask,
                                                                   scale=self.scaling)
            out = out.view(1, self.heads, n, self.head_dim).transpose(1, 2).reshape(1, n, self.heads * self.head_dim)
            h = h + attn.o_proj(out)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.lm_head(self.norm(h[:, n - keep :]))[0].float()

    @torch.inference_mode()
    def forward(self, ids: list[int], past: StaticKV | None = None, keep: int = 1, cancel=None, wanted=None):
        """`ModelRuntime.forward` on this path: (logits of the last `keep` positions, cache).
        Raises CapacityExceeded for a pass that would run past the capacity (the runtime then
        goes on with the positions in a transformers cache: `StaticKV.to_growing`). Every
        logit is computed (`wanted` is the CPU decoder's)."""
        past = past if past is not None else self.new_cache()
        n = len(ids)
        if past.length + n > self.capacity:
            raise CapacityExceeded(past)
        self.workspace.bind(past)
        graphs = self.graphs
        if graphs is not None and graphs.has(n):  # one launch (~1 ms): cancelled before, never inside
            if cancel is not None and cancel():
                raise ForwardCancelled()
            logits = graphs.replay(ids, past.length)[n - keep :]
        else:
            inp = torch.tensor([ids], dtype=torch.long, device=self.device)
            start = torch.tensor(past.length, dtype=torch.long, device=self.device)
            logits = self.step_logits(inp, start, keep, cancel)
        past.length += n
        return logits, past

    def capture(self, sizes) -> None:
        """Capture the passes of `sizes` tokens as CUDA graphs (CUDA only)."""
        self.graphs = DecodeGraphs(self, sizes)

    @torch.inference_mode()
    def warm_up(self, prompt_tokens: int = 256, sizes=()) -> dict:
        """Before the first request: library initialisation (cuBLAS, attention kernels), the
        graphs of `sizes` captured (CUDA), and one prefill of `prompt_tokens` tokens; the
        workspace is left empty. Returns what it did, in milliseconds."""
        import time

        t0 = time.perf_counter()
        kv = self.new_cache()
        n = min(prompt_tokens, self.capacity - 16)
        self.forward([0] * n, kv, 1)
        self.forward([0], kv, 1)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t1 = time.perf_counter()
        if sizes and self.device.type == "cuda":
            self.workspace.resident = None
            self.capture(sizes)
            torch.cuda.synchronize(self.device)
        t2 = time.perf_counter()
        self.workspace.resident = None  # the warm-up's positions are nobody's
        return {"prefill_ms": round((t1 - t0) * 1000, 1), "capture_ms": round((t2 - t1) * 1000, 1),
                "graphs": sorted(self.graphs.sizes) if self.graphs else []}


class CapacityExceeded(Exception):
    """A pass would run past the workspace's capacity: `cache` holds the positions so far."""

    def __init__(self, cache: StaticKV) -> None:
        super().__init__(f"past the static cache's {cache.workspace.capacity} positions")
        self.cache = cache


class DecodeGraphs:
    """The decoder's passes of a few token counts as CUDA graphs, captured once, sharing one
    memory pool (they never run at the same time), with static input buffers."""

    def __init__(self, decoder: StaticDecoder, sizes) -> None:
        self.decoder = decoder
        dev = decoder.device
        self.start = torch.zeros((), dtype=torch.long, device=dev)
        self._ids: dict[int, torch.Tensor] = {}
        self._out: dict[int, torch.Tensor] = {}
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        pool = torch.cuda.graph_pool_handle()
        saved = decoder.workspace.resident
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # warm-up runs before capture, as torch.cuda.graphs requires
            for n in sizes:
                self._ids[n] = torch.zeros((1, n), dtype=torch.long, device=dev)
                for _ in range(2):
                    decoder.step_logits(self._ids[n], self.start, n)
        torch.cuda.current_stream(dev).wait_stream(side)
        for n in sorted(sizes, reverse=True):  # the largest first: the pool fits the others
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                self._out[n] = decoder.step_logits(self._ids[n], self.start, n)
            self._graphs[n] = g
        decoder.workspace.resident = saved

    @property
    def sizes(self) -> list[int]:
        return list(self._graphs)

    def has(self, n: int) -> bool:
        return n in self._graphs

    def replay(self, ids: list[int], start: int) -> torch.Tensor:
        """The logits of all `len(ids)` positions (a copy: the graphs' outputs share a pool)."""
        n = len(ids)
        # from pageable memory, asynchronously: the driver stages the ids before returning, so
        # no host buffer is shared with a copy still queued behind earlier passes, and nothing waits
        self._ids[n][0].copy_(torch.tensor(ids, dtype=torch.long), non_blocking=True)
        self.start.fill_(start)
        self._graphs[n].replay()
        return self._out[n].clone()


def build_static_decoder(model: torch.nn.Module, capacity: int = DEFAULT_CAPACITY) -> StaticDecoder | None:
    """The static path for `model`, or None (logged) when its architecture isn't one it knows."""
    try:
        return StaticDecoder(model, capacity)
    except StaticUnsupported as e:
        log.info("no static decoding path for this model: %s", e)
        return None
