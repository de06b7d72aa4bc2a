"""CUTLASS shared-memory accounting, read from CUTLASS's own types, split by what each part does.

`cells` says what a cell is (architectures, dtypes, epilogues, kernel schedules); `source` writes
its C++ translation unit from the templates in `templates/cutlass/`; `toolchain` finds and runs
nvcc and the CUTLASS headers; `cache` keys and stores a cell's result; `diagnostics` reads the
compiler's log; `rows` builds a result row; `accounting.account` is the entry point.
"""
