#!/usr/bin/env bash
# Builds gpu/bin/cutlass_sm90_grouped (SM90 FP8 grouped GEMM tiles) from gpu/cutlass_sm90_grouped.cu.
# Needs nvcc (12.3+) and the CUTLASS headers of the nvidia-cutlass package; no GPU.
# Idempotent: rebuilds only when the source, the flags or the compiler changed.
# Environment: NVCC (default: nvcc on PATH, then /usr/local/cuda/bin/nvcc), PYTHON (default
# python3, used to find the nvidia-cutlass headers), CUTLASS_INCLUDE_DIR (overrides that lookup).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/cutlass_sm90_grouped.cu"
out_dir="$here/bin"
exe="$out_dir/cutlass_sm90_grouped"

# A binary built elsewhere and carried here (a GPU machine's nvcc may differ) is used as it is.
if [[ -x "$exe" && "${TILESWEEP_TRUST_PREBUILT:-0}" == 1 ]]; then
  echo "prebuilt: $exe"
  exit 0
fi

nvcc="${NVCC:-$(command -v nvcc || true)}"
if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [[ -z "$nvcc" ]]; then
  echo "build_cutlass.sh: no nvcc found (set NVCC)" >&2
  exit 1
fi

inc="${CUTLASS_INCLUDE_DIR:-}"
if [[ -z "$inc" ]]; then
  inc="$("${PYTHON:-python3}" -c 'import pathlib, cutlass_library as c
print(pathlib.Path(c.__file__).parent / "source" / "include")')"
fi
util="$(dirname "$inc")/tools/util/include"
for d in "$inc/cutlass" "$util/cutlass/util"; do
  if [[ ! -d "$d" ]]; then
    echo "build_cutlass.sh: missing CUTLASS headers: $d (pip install nvidia-cutlass)" >&2
    exit 1
  fi
done

flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
       -DNDEBUG -I"$inc" -I"$util")
stamp="$out_dir/.cutlass_sm90_grouped.stamp"
want="$(
  {
    sha256sum "$src" | cut -d' ' -f1
    printf '%s\n' "${flags[@]}"
    "$nvcc" --version | tail -n 2
  } | sha256sum | cut -d' ' -f1
)"
if [[ -x "$exe" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "up to date: $exe"
  exit 0
fi

mkdir -p "$out_dir"
tmp="$(mktemp "$out_dir/.cutlass_sm90_grouped.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
echo "$nvcc ${flags[*]} $src -o $exe"
start=$SECONDS
"$nvcc" "${flags[@]}" "$src" -o "$tmp"
chmod +x "$tmp"
mv -f "$tmp" "$exe"
trap - EXIT
printf '%s\n' "$want" > "$stamp.tmp" && mv -f "$stamp.tmp" "$stamp"
echo "built $exe in $((SECONDS - start)) s"
