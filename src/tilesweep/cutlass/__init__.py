"""CUTLASS shared-memory accounting from CUTLASS's own types; entry point: accounting.account."""
