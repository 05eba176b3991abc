"""Thread settings that keep syntaxlock fair to the other processes of a small machine.

PyTorch's CPU kernels, MKL's products and our own decoding kernels all run on one OpenMP
runtime (GNU libgomp, loaded with torch). By default its threads spin at the end of each
parallel region, waiting for the next one; a decoding step has a few hundred regions. Alone on
the machine that is harmless, but when another process wants the same cores (a second editor's
server, a build, a test run), a spinning thread holds a core while the thread it waits for is
not scheduled, and both processes collapse: on a 2-core machine at load ~6, a cold 958-token
prompt took 25-45 s instead of ~2.3 s, and a decoding step 200-840 ms instead of ~23 ms.
`OMP_WAIT_POLICY=PASSIVE` makes a waiting thread sleep at once (a futex), giving its core
back: the same prompt then took 4-7 s at that load, and two servers share the cores instead of
fighting for them (measured in docs/decisions.md; a short spin, GOMP_SPINCOUNT=10000, was as
bad as the default).

libgomp reads the variable when it is loaded, so `use_fair_threads` must run before torch is
imported (the CLI calls it first thing). A value the user set is left alone.
"""

from __future__ import annotations

import os
import sys

FAIR_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}


def use_fair_threads(environ: dict | None = None) -> dict[str, str]:
    """Set FAIR_ENVIRONMENT's variables that are not set yet (in `environ`, os.environ by
    default); the ones it set. Raises RuntimeError when torch is loaded already (too late for
    libgomp to see them)."""
    env = os.environ if environ is None else environ
    if environ is None and "torch" in sys.modules:
        raise RuntimeError("use_fair_threads() must run before torch is imported")
    added = {k: v for k, v in FAIR_ENVIRONMENT.items() if k not in env}
    env.update(added)
    return added
