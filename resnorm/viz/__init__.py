"""Figures both the training loop (TensorBoard images) and the reports (eval, sweep, results) draw: matplotlib to
PNG bytes or files.
Imports core and io only."""
