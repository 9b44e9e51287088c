"""Where bytes go: the path layer (local or gs://), workdirs and their logs, the workdir lock, checkpoints (orbax),
provenance (git commit, versions) and progress bars.
Imports core only."""
