"""Tools over the facade: run-configs, the runner, preflight checks, sweeps, calibration, reports, progress."""
