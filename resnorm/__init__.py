"""resnorm: residual connections and normalization placement in deep Transformers (JAX/Flax)."""
