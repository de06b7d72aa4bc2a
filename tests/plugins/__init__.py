"""Test-only backend plugins, loaded through TILESWEEP_PLUGINS (see tilesweep.backends)."""
