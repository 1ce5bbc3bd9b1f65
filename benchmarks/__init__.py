"""asv benchmark suites for ortbench: thin wrappers over :mod:`ortbench.bench`."""
