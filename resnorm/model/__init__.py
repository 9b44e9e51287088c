"""The model: the decoder (model.py), its layers, norms and kernels, the residual variants' registry (residual/), the
analytic FLOP count and the per-sublayer diagnostics (array math over the model's taps).
Imports core only: it knows nothing of configs files, data, training, io or the report."""
