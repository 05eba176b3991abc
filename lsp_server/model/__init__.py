"""The local model: loading and forward passes (`runtime`), the per-document prompt cache
(`prompt_cache`), the KV cache that grows in place (`kv_cache`) and the CPU kernels
(`kernels`)."""
