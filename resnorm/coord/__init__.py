"""Coordinate checks of the parametrization axis (coord): activation and update sizes over a ladder of widths and
depths. `python -m resnorm.coord`.
Imports core, io, model, config, data, scale, viz and step."""
