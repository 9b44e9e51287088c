"""The data: corpora (the stdlib and Shakespeare TFDS builders, text and parquet/jsonl shards), the grain input
pipeline, the stratified eval set and the byte-unigram baseline.
Imports core and io only: never the model."""
