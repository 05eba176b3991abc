"""The VS Code extension inside a real VS Code: code-server (VS Code served to a browser, from npm)
with the .vsix installed, driven in headless Chromium (Debian's, through playwright-core) against
the real `syntaxlock serve --stdio` and the default model. The suite is
editors/vscode/src/test/ui/vscode.ui.test.ts; each of its tests is one pytest test here.
scripts/setup.sh (scripts/setup_vscode_ui.sh) installs the parts; where one cannot be had the
tests are skipped with the reason (and fail in CI, where set-up installs them all)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "editors" / "vscode"
CODE_SERVER_HOME = Path(sys.prefix) / "code-server"  # scripts/setup_vscode_ui.sh puts it there
CODE_SERVER = CODE_SERVER_HOME / "node_modules" / "code-server"
CODE_SERVER_NODE = CODE_SERVER_HOME / "bin" / "node"  # the Node 24 it was built for
MODEL = "default"  # the model a user gets: its suggestions are what the README's screenshots show
OUT = Path(os.environ["SYNTAXLOCK_CACHE"]) / "vscode-ui"  # screenshots and logs of the last run

# the suite's tests, in its order
TESTS = [
    "code-server has the extension installed",
    "the status-bar item goes from loading to ready",
    "typing brings ghost text: the server's suggestion, drawn after the cursor",
    "Tab accepts: the editor holds what the server offered, the file parses, the acceptance is reported",
    "inside auto-closed brackets the suggestion replaces the closing ones, and the file parses",
    "Escape hides the ghost text and the dismissal is reported",
    "Toggle Completions from the Command Palette stops suggestions, and again brings them back",
    "a bad setting shows the server's message, and the server goes on",
    "each line the server logs shows once in the output channel",
]


def missing_parts() -> list[str]:
    """What the suite needs and this machine lacks, each with how to get it."""
    out = []
    if shutil.which("node") is None or shutil.which("npm") is None:
        out.append("node/npm (Node 20, to build the extension and drive the browser)")
    if shutil.which("chromium") is None:
        out.append("Chromium (Debian package `chromium`: scripts/setup.sh installs it as root)")
    if not (CODE_SERVER_HOME / ".syntaxlock-stamp").is_file() or not CODE_SERVER_NODE.is_file():
        out.append(f"code-server in {CODE_SERVER_HOME} (scripts/setup.sh installs it)")
    if not (EXT / "node_modules" / "playwright-core").is_dir():
        out.append("playwright-core in editors/vscode/node_modules (scripts/setup.sh runs `npm ci` there)")
    return out


MISSING = missing_parts()
if MISSING and os.environ.get("CI"):
    # set-up installs every part in CI: a missing one is a broken set-up, not a reason to skip
    pytest.fail("the real-VS-Code test lacks: " + "; ".join(MISSING), pytrace=False)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vscode"), pytest.mark.skipif(bool(MISSING), reason="the real-VS-Code test lacks: " + "; ".join(MISSING))]


@pytest.fixture(scope="module")
def store_ready() -> None:
    """The default model's mask store, built here if the cache lacks it, so that the server the
    suite starts only loads it."""
    from mask_store.loading import load_compiled

    load_compiled(MODEL)


@pytest.fixture(scope="module")
def suite(store_ready, vsix: Path) -> dict[str, str | None]:
    """Runs the suite once: test name -> None if it passed, else its failure text."""
    if OUT.exists():
        shutil.rmtree(OUT)
    env = os.environ.copy()
    env.update(
        SYNTAXLOCK_CODE_SERVER=str(CODE_SERVER),
        SYNTAXLOCK_CODE_SERVER_NODE=str(CODE_SERVER_NODE),
        SYNTAXLOCK_CHROMIUM=shutil.which("chromium"),
        SYNTAXLOCK_VSIX=str(vsix),
        SYNTAXLOCK_SERVER=str(Path(sys.executable).parent / "syntaxlock"),
        SYNTAXLOCK_PYTHON=sys.executable,
        SYNTAXLOCK_UI_MODEL=MODEL,
        SYNTAXLOCK_UI_OUT=str(OUT),
    )
    # its own session: on a time-out the whole group gets SIGTERM, and the suite ends code-server
    # (which it started in a group of its own) before it exits
    proc = subprocess.Popen(
        ["node", "--test", "--test-reporter=tap", "--test-timeout=900000", "out/test/ui/"],
        cwd=EXT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=1200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        stderr += "\n(the suite ran past 1200 s and was ended)"
    results: dict[str, str | None] = {}
    current = None
    for line in stdout.splitlines():
        m = re.match(r"(not )?ok \d+ - (.*?)(?: # .*)?$", line)
        if m:
            current = m.group(2)
            results[current] = None if m.group(1) is None else ""
        elif current is not None and results.get(current) is not None and line.startswith("  "):
            results[current] += line[2:] + "\n"
    logs = "".join(
        f"\n--- {p.name} (tail) ---\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(OUT.glob("*.log"))
    )
    results["__run__"] = f"exit {proc.returncode}\n{stdout[-4000:]}\n{stderr[-3000:]}{logs}"
    return results


@pytest.mark.parametrize("name", TESTS)
def test_vscode(suite, name):
    assert name in suite, f"the suite did not run {name!r}:\n{suite['__run__']}"
    assert suite[name] is None, f"{name}:\n{suite[name]}\n--- run ---\n{suite['__run__'][-6000:]}"


def test_vscode_suite_ran_exactly_these(suite):
    ran = set(suite) - {"__run__"}
    assert ran == set(TESTS), f"unexpected: {sorted(ran - set(TESTS))}, missing: {sorted(set(TESTS) - ran)}"
    assert suite["__run__"].startswith("exit 0"), suite["__run__"]
