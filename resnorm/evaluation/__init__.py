"""eval.py's work: evaluating a checkpoint with its own config (losses, diagnostics, figures) and KV-cached
generation.
Imports core, io, model, config, data, scale, viz and step: never the training loop."""
