# The two commands of the README. Both set up .venv/ first (idempotent, seconds when ready).
PY := .venv/bin/python
DEMO_FILE ?= examples/hottest_day.py
DEMO_LINE ?= 21
DEMO_CHAR ?= 38

.PHONY: setup demo test
setup:
	bash scripts/setup.sh

# the main job: complete a real file at a real position with the default model (the first run
# converts the model and builds the mask store, once)
demo: setup
	$(PY) -m lsp_server.cli complete $(DEMO_FILE) --line $(DEMO_LINE) --character $(DEMO_CHAR)

test: setup
	$(PY) -m pytest -q
