"""How decoding uses the names analysis (the `identifiers` option)."""

from __future__ import annotations

import enum


class IdentifierMode(enum.Enum):
    OFF = "off"  # the analysis is not made and not used
    BIAS = "bias"  # tokens leaving every known name lose `BIAS_NATS` of logit
    CONSTRAIN = "constrain"  # as BIAS, and masked where the analysis is sure (closed receivers)


IDENTIFIER_MODES = tuple(m.value for m in IdentifierMode)
