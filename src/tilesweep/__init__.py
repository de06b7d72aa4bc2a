"""tilesweep: which GPU kernel configurations launch, how fast they decode, what bounds them."""

__version__ = "0.1.0"
