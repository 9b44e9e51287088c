"""The bench: step times, MFU and memory of the real steps (bench), the loop against its bare steps (bench_loop),
decoding (bench_decode). `python -m resnorm.bench`.
Imports any group but sweep and results."""
