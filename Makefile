# The two commands of the README. Both set up .venv/ first (idempotent, seconds when ready).
PY := .venv/bin/python
DEMO_FILE ?= $(shell python3 -c 'import json.decoder as m; print(m.__file__)')

.PHONY: setup demo test
setup:
	bash scripts/setup.sh

# the main job: until the completion engine lands, check a real file against the grammar
demo: setup
	$(PY) -m lsp_server.cli check $(DEMO_FILE)

test: setup
	$(PY) -m pytest -q
