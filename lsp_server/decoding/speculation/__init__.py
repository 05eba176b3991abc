"""Speculative decoding under the grammar: draft sources (`lookup`, `draft_model`), the
acceptance maths and γ chooser (`acceptance`), learnt estimates (`stats`), and the `Speculator`
that builds grammar-checked drafts (`speculator`)."""
