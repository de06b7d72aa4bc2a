"""CUTLASS shared-memory accounting, read from CUTLASS's own types; `accounting.account` is the
entry point."""
