"""Experiments: mechanism testbeds, pre-registered sweeps, their analysis tools and results (index: README.md)."""
