"""How decoding uses the names analysis (the `identifiers` option). The option's values are
listed in `options.py` (options sit below decoding and may not import it); this enum holds the
same values (tests/test_architecture.py checks that they agree)."""

from __future__ import annotations

import enum


class IdentifierMode(enum.Enum):
    OFF = "off"  # the analysis is not made and not used
    BIAS = "bias"  # tokens leaving every known name lose `BIAS_NATS` of logit
    CONSTRAIN = "constrain"  # as BIAS, and masked where the analysis is sure (closed receivers)
