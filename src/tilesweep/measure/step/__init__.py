"""The whole decode step as a GPU runs it, one module a piece."""
