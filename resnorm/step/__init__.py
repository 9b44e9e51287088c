"""The compiled steps and the state they act on: train, eval and diagnostics steps, the optimizer, and the runtime
that builds a run's mesh, state and jitted steps from a config.
Imports core, config, model and scale."""
