"""Errors a user sees as one line."""


class ConfigError(ValueError):
    """A config value or override that cannot describe a real sweep."""
