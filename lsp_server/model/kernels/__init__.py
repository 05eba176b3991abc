"""Our CPU kernels for decoding steps: the C library and its loader (`library`), float16 weight
copies for few-row products (`half_weights`) and whole Llama decoder layers in one call
(`fused_layers`)."""
