"""Tools around the core: sweeps, the sweep report, the results report, the bench, figures."""
