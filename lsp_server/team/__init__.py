"""The team mode: many editors' completions from one shared vLLM server (docs/team.md)."""
