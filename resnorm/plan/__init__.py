"""The memory plan: compile the steps for a target (a TPU slice, N GPUs) without running them (dryrun, memplan), and
the table of plans over configs and targets (memtable).
Imports core, config, model, scale and step: never the training loop."""
