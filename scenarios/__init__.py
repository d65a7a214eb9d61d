"""Scenarios: transcript importers (one module per format), the synthetic generator, probe mining."""
