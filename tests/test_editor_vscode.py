"""The VS Code extension (editors/vscode): its own test suite under `npm test` (strict tsc build,
unit tests with a stubbed `vscode` module, and an integration test against the real
`syntaxlock serve --stdio` with the tiny model), and its packaging into a .vsix."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "editors" / "vscode"

NPM = shutil.which("npm")
# npm builds into editors/vscode: one test worker runs every test that does (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("vscode")
needs_node = pytest.mark.skipif(
    shutil.which("node") is None or NPM is None,
    reason="node/npm are not installed: the VS Code extension is not tested",
)


def _npm(*args: str, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    if not (EXT / "node_modules" / "vscode-languageclient").is_dir():
        pytest.fail("editors/vscode/node_modules is missing: run scripts/setup.sh (it runs `npm ci` there)")
    return subprocess.run(
        [NPM, *args], cwd=EXT, env=env or os.environ.copy(), capture_output=True, text=True, timeout=timeout
    )


def _tap_counts(out: str) -> dict[str, int]:
    """node --test's closing counts (`# tests 59`, `# pass 59`, ...)."""
    return {k: int(v) for k, v in re.findall(r"^# (tests|pass|fail|cancelled|skipped|todo) (\d+)$", out, re.M)}


@pytest.fixture(scope="module")
def store_ready(tiny_model_dir: Path) -> Path:
    """The tiny model's mask store, built here if the cache lacks it (the first build takes
    minutes on a small machine): the server started by the editor suite then only loads it."""
    from mask_store.loading import load_compiled

    load_compiled(str(tiny_model_dir))
    return tiny_model_dir


@needs_node
@pytest.mark.slow
def test_npm_test_unit_and_integration(store_ready: Path):
    env = os.environ.copy()
    env["SYNTAXLOCK_TEST_MODEL"] = str(store_ready)
    env["SYNTAXLOCK_SERVER"] = str(Path(sys.executable).parent / "syntaxlock")
    env["SYNTAXLOCK_CACHE"] = os.environ["SYNTAXLOCK_CACHE"]
    r = _npm("test", env=env)
    out = r.stdout + r.stderr
    counts = _tap_counts(r.stdout)
    failed = [ln.strip() for ln in out.splitlines() if re.match(r"\s*not ok \d+", ln)]
    assert r.returncode == 0, (
        f"npm test failed ({counts}):\n" + "\n".join(failed) + "\n--- output tail ---\n" + out[-6000:]
    )
    # both suites ran: the unit tests and the nine integration tests
    assert counts.get("fail") == 0 and counts.get("cancelled") == 0, counts
    assert counts.get("pass", 0) >= 60, f"too few tests ran: {counts}\n{out[-3000:]}"
    assert "syntaxlock serve --stdio" in r.stdout, "the integration suite did not run"


@needs_node
@pytest.mark.slow
def test_package_vsix(vsix: Path):
    """`npm run package` (the session's `vsix` fixture) makes a .vsix that holds the compiled
    extension and its runtime dependency, and nothing of its sources or tests."""
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("extension/package.json"))
    main = "extension/" + manifest["main"].removeprefix("./")
    assert main in names, f"{main} is not in the package"
    # the runtime dependency travels with the extension; dev dependencies and sources do not
    assert "extension/node_modules/vscode-languageclient/lib/node/main.js" in names
    assert not any(n.startswith("extension/node_modules/typescript/") for n in names)
    assert not any(n.startswith("extension/src/") or n.startswith("extension/out/test/") for n in names)
    assert manifest["activationEvents"] == ["onLanguage:python"]


def test_settings_mirror_the_server_options():
    """package.json has one setting per server option, with the server's default and choices."""
    from lsp_server.options import DEVICES, INT_RANGES, MAX_TEMPERATURE, MODES
    from grammar_tools.parsing.versions import SUPPORTED, format_version
    from lsp_server.server.settings import (ENGINE_KEYS, SERVER_FLOAT_KEYS, SERVER_FLOAT_RANGES, SERVER_INT_KEYS,
                                            SERVER_INT_RANGES, SERVER_KEYS, ServerOptions)

    props = json.loads((EXT / "package.json").read_text())["contributes"]["configuration"]["properties"]
    client_only = ("syntaxlock.server.", "syntaxlock.trace.")
    mirrored = {k.removeprefix("syntaxlock."): v for k, v in props.items() if not k.startswith(client_only)}
    assert set(mirrored) == set(ENGINE_KEYS) | set(SERVER_KEYS) | set(SERVER_INT_KEYS) | set(SERVER_FLOAT_KEYS)
    defaults = ServerOptions().to_json()
    for key, spec in mirrored.items():
        assert spec["default"] == defaults[key], key
    assert tuple(mirrored["mode"]["enum"]) == MODES
    assert tuple(mirrored["device"]["enum"]) == DEVICES
    # and the server's ranges
    for name, (lo, hi) in INT_RANGES.items():
        key = next(k for k, v in ENGINE_KEYS.items() if v == name)
        assert (mirrored[key]["minimum"], mirrored[key]["maximum"]) == (lo, hi), key
    for key, name in SERVER_INT_KEYS.items():
        assert (mirrored[key]["minimum"], mirrored[key]["maximum"]) == SERVER_INT_RANGES[name], key
    for key, name in SERVER_FLOAT_KEYS.items():
        assert (mirrored[key]["minimum"], mirrored[key]["maximum"]) == SERVER_FLOAT_RANGES[name], key
    assert mirrored["temperature"]["maximum"] == MAX_TEMPERATURE
    assert mirrored["pythonVersion"]["enum"] == [None] + [format_version(v) for v in SUPPORTED]
    # and the extension sends exactly those keys
    src = (EXT / "src" / "settings.ts").read_text()
    keys = re.search(r"SERVER_OPTION_KEYS = \[(.*?)\] as const", src, re.S).group(1)
    assert set(re.findall(r'"(\w+)"', keys)) == set(mirrored)
