"""Models: specs, the embedded models, hub/local/GGUF loading and caching, checkpoint series."""
