"""Where a request's decoding time goes, per generated token, without a profiler (prints JSON).

    .venv/bin/python bench/step_split.py stdlib|thirdparty [CUTS]

For `CUTS` (12) cut points of `bench/lsp_latency.py`'s, the engine completes each twice (the
first computes and caches its prompt) and the second is measured: the engine's decode time, the
model's forward passes, within them the C kernels' calls (all layers of a short pass, the
products: the head, and the prompt's), the Python around the kernels, and the loop's own work
(masks, drafts, choices, checks) outside the forward passes. Threads wait as the server's do.
"""
import json
import sys
import time
from pathlib import Path

from lsp_server.threads import use_fair_threads

use_fair_threads()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_latency import cut_points  # noqa: E402

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest  # noqa: E402
from lsp_server.options import EngineOptions  # noqa: E402


def main() -> int:
    code = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    engine = CompletionEngine.load(EngineOptions())
    acc = {"c_layers": 0.0, "c_matmul": 0.0, "c_attention": 0.0, "forward": 0.0}

    def timed(name, f):
        def g(*a, **k):
            t0 = time.perf_counter()
            r = f(*a, **k)
            acc[name] += time.perf_counter() - t0
            return r
        return g

    from lsp_server.model.kernels import build

    kern = build.load()
    kern._layers = timed("c_layers", kern._layers)
    kern._matmul = timed("c_matmul", kern._matmul)
    kern._attention = timed("c_attention", kern._attention)
    engine.runtime.forward = timed("forward", engine.runtime.forward)
    decode = total = 0.0
    tokens = 0
    measured = {k: 0.0 for k in acc}
    for i, c in enumerate(cut_points(n, 0, code)):
        lines = c.doc.split("\n")
        cursor = sum(len(line) + 1 for line in lines[: c.line]) + c.col
        request = CompletionRequest(c.doc, cursor=cursor, document=f"file:///d{i}.py", short_first=False)
        engine.complete(request)  # its prompt computed and cached; then the same request, measured
        for k in acc:
            acc[k] = 0.0
        t0 = time.perf_counter()
        res = engine.complete(request)
        total += time.perf_counter() - t0
        decode += res.figures.decode_ms / 1000
        tokens += res.figures.tokens_generated + res.figures.tokens_forced
        for k in acc:
            measured[k] += acc[k]
    kernels_s = measured["c_layers"] + measured["c_matmul"] + measured["c_attention"]

    def per(seconds: float) -> float:
        return round(seconds * 1000 / max(tokens, 1), 2)

    print(json.dumps({"code": code, "requests": n, "tokens": tokens, "per_token_ms": {
        "decode (the engine's decode_ms)": per(decode), "forward passes": per(measured["forward"]),
        "  C: all layers of short passes": per(measured["c_layers"]),
        "  C: products (the head; prompts')": per(measured["c_matmul"]),
        "  C: attention of unfused passes": per(measured["c_attention"]),
        "  Python around the kernels": per(measured["forward"] - kernels_s),
        "the loop outside the forward passes": per(decode - measured["forward"]),
        "the request outside decoding (setup, checks)": per(total - decode)}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
