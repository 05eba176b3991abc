"""Speculative decoding under the grammar: the `Speculator`, its prompt lookup, acceptance maths
and learnt estimates (`speculator`), and the draft model source (`draft_model`)."""
