"""Devices and processes: meshes and partition specs, multi-process start-up, host memory settings, the Cloud
TPU slice topologies the memory plan compiles for.
Imports core only."""
