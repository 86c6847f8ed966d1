"""Model definitions and data the demos and benchmarks use."""
