"""Decoding: from a document and a cursor to a completion. The prompt and token healing, the
masked decoding loop with fast-forward, sampling, speculation and stopping, and the
`CompletionEngine` that puts them together (`engine`)."""
