"""The core: errors and exit codes (one line and exit 2 for bad input), and the bootstrap statistics.
Pure helpers that every other group may use.
Imports nothing of resnorm."""
