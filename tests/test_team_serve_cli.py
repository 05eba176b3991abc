"""The team mode's command line: `syntaxlock serve --team URL` (the teamServer setting's
default) and `syntaxlock team-serve` (what it runs, and what it says when it can't)."""

from __future__ import annotations

import argparse

import pytest

from lsp_server.cli import build_parser
from lsp_server.team import serve_cli


def test_serve_takes_a_team_url():
    args = build_parser().parse_args(["serve", "--team", "http://gpu-box:8000"])
    assert args.team == "http://gpu-box:8000"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--team", "gpu-box:8000"])


def test_team_serve_runs_vllm_with_the_processor(tmp_path):
    args = build_parser().parse_args(["team-serve", "--model", "default", "--port", "8123", "--", "--seed", "3"])
    cmd = serve_cli.vllm_command("/x/python", tmp_path, args)
    assert cmd[cmd.index("--logits-processors") + 1] == serve_cli.PROCESSOR
    assert cmd[cmd.index("--port") + 1] == "8123" and "--enable-prefix-caching" in cmd
    assert cmd[-2:] == ["--seed", "3"]
    assert "--max-num-batched-tokens" not in cmd  # left to vLLM unless set (tuned_for sets it on the CPU build)
    args.max_num_batched_tokens = 64
    assert serve_cli.vllm_command("/x/python", tmp_path, args)[-4:-2] == ["--max-num-batched-tokens", "64"]
    env = serve_cli.vllm_env("default", None, ("g" * 16, "t" * 16), 2, threads=2)
    assert env["OMP_NUM_THREADS"] == "2"
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0"  # the V1 logits-processor interface
    assert env["SYNTAXLOCK_TEAM_GRAMMAR"] == "g" * 16 and env["SYNTAXLOCK_TEAM_MODEL"] == "default"
    module, _, cls = serve_cli.PROCESSOR.partition(":")
    assert module == "lsp_server.team.vllm_processor" and cls == "SyntaxlockLogitsProcessor"


def test_team_serve_says_how_to_get_vllm(monkeypatch, tmp_path):
    monkeypatch.setattr(serve_cli.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(serve_cli, "TEAM_VENV", tmp_path / ".venv-team")
    with pytest.raises(serve_cli.TeamSetupError, match="make team"):
        serve_cli.team_python()


def test_a_model_directory_without_architectures_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": null, "model_type": "llama"}')
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(serve_cli.TeamSetupError, match="architectures"):
        serve_cli.vllm_model_dir(str(tmp_path), "/x/python")


def test_the_processor_module_imports_without_vllm():
    """The main environment has no vLLM: the module imports, the class is vLLM's only."""
    import importlib.util

    from lsp_server.team import vllm_processor

    if importlib.util.find_spec("vllm") is None:
        assert vllm_processor.LogitsProcessor is None
        assert not hasattr(vllm_processor, "SyntaxlockLogitsProcessor")
    with pytest.raises(ValueError, match="JSON string"):
        vllm_processor.validate({"syntaxlock": 3})
    vllm_processor.validate({"other": "x"})  # not ours: nothing to check


def test_parser_lists_team_serve():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert "team-serve" in sub.choices
