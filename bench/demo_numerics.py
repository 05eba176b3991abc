"""The demo's completion by numerics and canonical tokenization (prints JSON).

    .venv/bin/python bench/demo_numerics.py [--device cpu|cuda] [--dtypes float32,bfloat16]

The default model completes `examples/hottest_day.py` at the end of its last line (the demo)
through the static decoding path (`lsp_server/model/static_decode.py`; eager on the CPU, graphs
on CUDA) in each dtype, with canonical tokenization on and off: which of the two moves the
answer away from the CPU product's `day["high"]` (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    args = ap.parse_args(argv)

    import torch

    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.model.runtime import load_model
    from lsp_server.model.static_decode import GRAPH_SIZES, StaticDecoder
    from lsp_server.options import EngineOptions
    from mask_store.loading import load_compiled

    text = (ROOT / "examples" / "hottest_day.py").read_text()
    line = len(text.rstrip("\n").split("\n")) - 1
    char = len(text.split("\n")[line])
    opts = EngineOptions(device=args.device)
    compiled, _ = load_compiled("default", None, progress=False)
    out = {}
    for name in args.dtypes.split(","):
        rt = load_model("default", args.device, half_decode=False)
        rt.model.to(getattr(torch, name))
        static = StaticDecoder(rt.model)
        static.warm_up(sizes=GRAPH_SIZES if args.device == "cuda" else ())
        engine = CompletionEngine(opts, replace(rt, static=static), compiled)
        for canonical in (True, False):
            r = engine.complete(CompletionRequest.at(text, line, char, document=f"file:///{name}-{canonical}.py", short_first=False),
                                options=replace(opts, canonical=canonical))
            out[f"{name} canonical={'on' if canonical else 'off'}"] = r.text
            print(json.dumps({name: r.text, "canonical": canonical}), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
