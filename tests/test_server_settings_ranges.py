"""Settings that look valid but broke every completion (issue 22, finding 8): seed 2^64 or 1e300
(overflow in torch's generator), temperature 1e-300 (logits / T overflow: inf, then NaN
probabilities), maxTokens 4096 (41 s, then an empty answer). They are refused with a message
naming the range, the previous value is kept, and completions go on; the extreme values inside
the ranges decode."""

from __future__ import annotations

import math

import pytest

from lsp_server.options import INT_RANGES, MAX_TEMPERATURE, MIN_TEMPERATURE, EngineOptions, OptionError
from lsp_server.server.settings import ServerOptions
from raw_lsp import RawServer

REFUSED = [
    ("seed", 2**64), ("seed", 1e300), ("seed", -1), ("seed", 2**53), ("seed", 1.5),
    ("temperature", 1e-300), ("temperature", 0.001), ("temperature", -0.5), ("temperature", 1e300),
    ("temperature", math.nan), ("temperature", math.inf),
    ("topP", 0), ("topP", math.nan), ("topP", 1.0000001),
    ("maxTokens", 4096), ("maxTokens", 0), ("maxTokens", 1e300),
    ("contextTokens", 10**9), ("contextTokens", 8.5),
    ("pythonVersion", "3.7"), ("pythonVersion", "3.15"), ("pythonVersion", 3.12), ("pythonVersion", "three"),
]
EXTREMES = {"seed": INT_RANGES["seed"][1], "temperature": MIN_TEMPERATURE, "topP": 1e-9}


@pytest.mark.parametrize("key, value", REFUSED, ids=[f"{k}={v!r}" for k, v in REFUSED])
def test_out_of_range_settings_are_refused(key, value):
    opts, problems = ServerOptions().merged({key: value})
    assert opts == ServerOptions() and len(problems) == 1 and f"syntaxlock.{key}" in problems[0]
    assert len(problems[0]) < 200  # 1e300 and 2^64 are shown short


def test_the_range_ends_are_accepted():
    for name, (lo, hi) in INT_RANGES.items():
        for v in (lo, hi):
            assert getattr(EngineOptions().updated(**{name: v}), name) == v
        for v in (lo - 1, hi + 1):
            with pytest.raises(OptionError):
                EngineOptions().updated(**{name: v})
    for t in (0, 0.0, MIN_TEMPERATURE, MAX_TEMPERATURE):
        assert EngineOptions().updated(temperature=t).temperature == t


@pytest.mark.slow
def test_the_server_refuses_them_and_keeps_completing(tiny_model_dir):
    uri = "file:///ranges.py"
    text = "import os\n\n\ndef join(parts):\n    return os.path.join(*parts)\n\n\nname = os.pa"
    with RawServer() as s:
        s.initialize({"model": str(tiny_model_dir), "maxTokens": 6, "mode": "single", "contextTokens": 128})
        s.open(uri, text)

        def complete() -> list:
            r = s.response(s.inline(uri, 7, 12))
            assert "result" in r, r
            return [(i["insertText"], i["range"]) for i in r["result"]["items"]]

        baseline = complete()
        for key, value in REFUSED:
            if isinstance(value, float) and not math.isfinite(value):
                continue  # not JSON
            seen = len(s.received)
            s.notify("workspace/didChangeConfiguration", {"settings": {"syntaxlock": {key: value}}})

            def refusal(m, key=key, seen=seen) -> bool:
                return (m.get("method") == "window/showMessage" and f"syntaxlock.{key}" in m["params"]["message"]
                        and m in s.received[seen:])

            shown = s.wait_for(refusal)
            assert "keeping" in shown["params"]["message"]
            assert complete() == baseline
        settings = s.call("workspace/executeCommand", {"command": "syntaxlock.status"})["result"]["settings"]
        assert (settings["seed"], settings["temperature"], settings["maxTokens"]) == (None, 0, 6)
        # the extremes inside the ranges decode (sampling with a tiny temperature, the largest seed)
        s.notify("workspace/didChangeConfiguration", {"settings": {"syntaxlock": EXTREMES}})
        for _ in range(3):
            complete()
        settings = s.call("workspace/executeCommand", {"command": "syntaxlock.status"})["result"]["settings"]
        assert {k: settings[k] for k in EXTREMES} == EXTREMES
        log = s.log_text()
        assert "completion failed" not in log and "Traceback" not in log
