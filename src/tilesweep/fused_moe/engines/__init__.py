"""The serving engines' own fused-MoE kernels: taken from their wheels (wheels.py), launched as
each engine launches them (one module per engine: vllm.py, sglang.py), timed (timer.py) on
weights in the engines' formats (formats.py), and the check, search and drop-in tables run in
them (check.py, search.py, dropins.py, stage.py), with the `engine` decode rows (runner.py,
decode_rows.py)."""
