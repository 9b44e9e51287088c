"""The config schema: every key's default and check (configlib), dotted-key parsing (configkeys); a model config
is validated against the variant registry.
Imports core and model (the registry) only."""
