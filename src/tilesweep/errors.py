"""Errors a user sees as one line."""


class ConfigError(ValueError):
    """A config value or override that cannot describe a real sweep."""


class LaunchError(RuntimeError):
    """A kernel launch the device (or the launcher) refused; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
