"""The training loop (trainer.py) and the pieces it calls: the workdir's preparation, the eval and diagnostics
cadence, TensorBoard, and upcycling from another run's params.
Imports every group below it (core .. evaluation); nothing above (plan, sweep, results, bench) imports it but bench."""
