"""Measurement code: timing, device ceilings, the decode and collective benchmarks."""
