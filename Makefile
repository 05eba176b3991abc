# The two commands of the README, and the inner loop's. Each sets up .venv/ first (idempotent,
# seconds when ready): the demo only what it runs, the others also the test tools (the dev extra,
# the VS Code extension's npm packages, Chromium and code-server for the real-VS-Code test).
PY := .venv/bin/python
DEMO_FILE ?= examples/hottest_day.py
DEMO_LINE ?= 21
DEMO_CHAR ?= 38

.PHONY: setup setup-demo demo test check lint team
setup:
	bash scripts/setup.sh test

setup-demo:
	bash scripts/setup.sh demo

# the main job: complete a real file at a real position with the default model (the first run
# converts the model and builds the mask store, once)
demo: setup-demo
	$(PY) -m lsp_server.cli complete $(DEMO_FILE) --line $(DEMO_LINE) --character $(DEMO_CHAR)

# everything CI runs: the linter, then the whole test suite in two worker processes (most tests
# wait on a server, an editor or a compiler; tests/conftest.py says what the workers share)
test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 2 --dist loadgroup

# the inner loop: the linter and the tests not marked `slow` (under 3 minutes on a 2-core
# machine once the test cache holds the mask stores; see the README)
check: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow"

lint: setup
	$(PY) -m ruff check .

# the team server's environment (.venv-team/: vLLM's CPU build, docs/team.md); then
# `.venv-team/bin/syntaxlock team-serve --model default --port 8000`
team:
	bash scripts/setup.sh team
