"""The local model: loading and forward passes (`runtime`), the KV caches (`kv_cache`: the CPU
model's, grown in place, and each document's), the model step's timing (`step_timing`) and the
CPU kernels (`kernels`)."""
