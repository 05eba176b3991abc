"""What a loaded engine is made of is kept out of the cycle collector's way (`freeze_loaded`:
a full collection no longer walks it), and a reload frees the previous engine's cycles."""

from __future__ import annotations

import gc
import weakref

from lsp_server.server.engine_host import freeze_loaded


class Engine:
    """An object graph with a cycle, as a loaded model's modules are."""

    def __init__(self) -> None:
        self.parts = [self]


def test_the_loaded_objects_are_frozen_and_a_reload_frees_the_previous_ones():
    try:
        engine = Engine()
        gone = weakref.ref(engine)
        freeze_loaded()
        assert gc.get_freeze_count() > 0
        assert not any(o is engine for o in gc.get_objects())  # a full collection no longer walks it
        del engine  # replaced: only the cycle holds it now
        gc.collect()
        assert gone() is not None  # frozen: the collector leaves it
        freeze_loaded()  # the next load
        assert gone() is None
    finally:
        gc.unfreeze()
