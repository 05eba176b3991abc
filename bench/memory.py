"""Resident memory of the real server over stdio, steady and peak, split by part (prints JSON).

    .venv/bin/python bench/memory.py [--requests 40] [--code both|stdlib|thirdparty]
                                     [--model default] [--device cpu|cuda|auto] [--max-tokens 64]
                                     [--identifiers constrain|bias|off] [--no-imports]
                                     [--cache-mb N] [--settle-s 60]

Starts `syntaxlock serve` (as bench/lsp_latency.py does), waits for the model, then asks for
`--requests` completions at cut points of real files (half stdlib, half third-party wheels with
`both`), each document opened and kept open (the editor's tabs: their KV caches stay, under the
cache cap). Reported, in MiB:
- `after_load` and `steady` (after the requests, once the server's CPU is idle): the kernel's
  totals (VmRSS, RssAnon, RssFile) and the server's own split (`syntaxlock.status` memory:
  resident memory by mapping: memory-mapped weights, torch's libraries, other libraries and
  files, anonymous; the model's tensors by dtype and how much of them views the file; the mask
  store's tables; the KV caches);
- `heap` (the C heap in use, free and in its own mappings; Python's allocated blocks), `mask_caches`
  (the masks memoized across requests), `names_process` (the names analysis's jedi process: its memory and the source lines it keeps parsed);
- `settled`: the same once the server went idle (the names analyses of the last documents run
  behind the requests; at most `--settle-s`), `peak_settled` VmHWM then;
- `peak`: VmHWM, the most the server was ever resident; `timeline_rss_hwm`: VmRSS and VmHWM after
  each request (where the peak came);
- `child_processes_rss`: the server's child processes (jedi's subprocess for the names
  analysis), resident beside it;
- `imports`: what the libraries cost alone, each step in a fresh interpreter (Python, then
  torch, pygls with lsprotocol, the tokenizer, the whole server's modules; then transformers
  with the Llama model class, which the CPU server does not import), as RSS after each step;
- with `--identifiers off`, the same without the names analysis (jedi): the difference is what
  the analysis holds in the server;
- the same totals for the host process on a GPU (`--device cuda`), where the weights live on
  the GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lsp_latency import Server, cut_points, idle_after  # noqa: E402

from lsp_server.model.memory_parts import process_memory  # noqa: E402

MIB = 1024  # KiB per MiB

IMPORT_STEPS = [
    ("python", ""),
    ("torch", "import torch"),
    ("pygls_lsprotocol", "import pygls.server, lsprotocol.types"),
    ("tokenizer", "from mask_store.vocabulary import load_tokenizer; load_tokenizer({model!r})"),
    ("server_modules", "import lsp_server.server.server, lsp_server.decoding.engine, lsp_server.model.runtime"),
    # what the CPU server never imports (model/cpu_decoder.py) and the GPU path and other
    # architectures do: transformers with its Llama model class
    ("transformers_llama", "import transformers; from transformers import LlamaForCausalLM"),
]


def import_ladder(model: str) -> dict:
    """RSS (MiB) of a fresh interpreter after each step of `IMPORT_STEPS` (all steps so far)."""
    out, code = {}, []
    for name, step in IMPORT_STEPS:
        if step:
            code.append(step.format(model=model))
        script = "\n".join(code + [
            "from lsp_server.model.memory_parts import process_memory",
            "import json; print(json.dumps(process_memory()))",
        ])
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        if proc.returncode != 0:
            out[name] = {"error": proc.stderr.strip()[-500:]}
            continue
        mem = json.loads(proc.stdout.strip().splitlines()[-1])
        out[name] = {k: round(mem[k] / MIB, 1) for k in ("VmRSS", "RssAnon", "RssFile")}
    return out


def child_processes(pid: int) -> dict:
    """RSS (MiB) of the server's child processes by command (jedi's subprocess for the names
    analysis): memory the server costs beside its own."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            try:
                cmd = Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0")
                name = " ".join(Path(c.decode(errors="replace")).name for c in cmd[:2])
                out[f"{kid} {name}"] = round(process_memory(kid)["VmRSS"] / MIB, 1)
            except (OSError, KeyError):
                continue
    return out


def mib(d: dict) -> dict:
    return {k: round(v / MIB, 1) for k, v in d.items()}


async def snapshot(s: Server) -> dict:
    status = await s.command("syntaxlock.status")
    mem = status.get("memory", {}) if isinstance(status, dict) else {}
    out = {"process": mib(process_memory(s.pid)), "parts": mib(mem.get("parts_kib", {}))}
    if "model_bytes" in mem:
        out["model_tensors"] = {k: round(v / (1 << 20), 1) for k, v in mem["model_bytes"].items()}
    if "mask_store_bytes" in mem:
        out["mask_store"] = round(mem["mask_store_bytes"] / (1 << 20), 1)
    if "mask_cache_bytes" in mem:
        out["mask_caches"] = round(mem["mask_cache_bytes"] / (1 << 20), 1)
    heap = mem.get("heap_bytes", {})
    out["heap"] = {k: v if k == "python_blocks" else round(v / (1 << 20), 1) for k, v in heap.items()}
    names = mem.get("names_process")
    if names:
        out["names_process"] = {"process": mib(names["kib"]), "parsed_lines": names["parsed_lines"]}
    out["kv_caches"] = status.get("kvCache", {}).get("memory_mb") if isinstance(status, dict) else None
    return out


async def run(args) -> dict:
    out = {"model": args.model, "device": args.device, "requests": args.requests, "code": args.code,
           "identifiers": args.identifiers,
           "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    options = {"model": args.model, "device": args.device, "maxTokens": args.max_tokens,
               "identifiers": args.identifiers}
    if args.cache_mb is not None:
        options["cacheMemoryMB"] = args.cache_mb
    s = Server(args, options)
    out["ready_s"] = round(await s.start(), 1)
    out["after_load"] = await snapshot(s)
    answered, timeline = 0, []
    for i, cut in enumerate(cut_points(args.requests, args.seed, args.code)):
        uri = f"file:///memory/{i}.py"
        s.open(uri, cut.doc)
        r = await s.ask(uri, cut.line, cut.col)
        answered += bool(r and getattr(r, "items", r))
        now = process_memory(s.pid)
        timeline.append([round(now["VmRSS"] / MIB), round(now["VmHWM"] / MIB)])
    out["answered"] = answered
    out["timeline_rss_hwm"] = timeline
    out["idle_after_s"] = await idle_after(s.pid, horizon=5.0)
    out["steady"] = await snapshot(s)
    out["peak"] = {"VmHWM": round(process_memory(s.pid)["VmHWM"] / MIB, 1)}
    # the names analyses of the last documents may still run 5 s after the last answer (queued
    # behind the requests): `settled` is taken once the server has been idle (or at the horizon)
    waited = 5.0
    while waited < args.settle_s and await idle_after(s.pid, horizon=5.0) is None:
        waited += 5.0
    out["settled_after_s"] = waited
    out["settled"] = await snapshot(s)
    out["peak_settled"] = {"VmHWM": round(process_memory(s.pid)["VmHWM"] / MIB, 1)}
    out["child_processes_rss"] = child_processes(s.pid)
    await s.stop()
    if not args.no_imports:
        out["imports"] = import_ladder(args.model)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--code", default="both", choices=["both", "stdlib", "thirdparty"])
    ap.add_argument("--model", default="default")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--identifiers", default="constrain", choices=["constrain", "bias", "off"],
                    help="the names analysis (jedi): the server's default, or off to see what it holds")
    ap.add_argument("--cache-mb", type=int, help="the server's cacheMemoryMB, the KV caches' cap (default: the server's)")
    ap.add_argument("--settle-s", type=float, default=60.0,
                    help="at most this long after the requests for the server to go idle (`settled`)")
    ap.add_argument("--no-imports", action="store_true", help="leave out `imports` (fresh interpreters, slow)")
    ap.add_argument("--verbose", action="store_true", help="the server's stderr on ours")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=1))


if __name__ == "__main__":
    main()
