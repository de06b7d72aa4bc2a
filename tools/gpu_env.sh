# Sourced by the GPU-machine scripts: the carried wheels (.whl) installed beside the machine's
# own torch and triton (never over them), tilesweep's src on the path, NVLink multicast off.
site=${TILESWEEP_SITE:-/tmp/tilesweep-site}
if ! python3 -c 'import snakemake, hydra' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || return 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="$site/bin:$PATH"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# NVLink multicast stays off on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 TILESWEEP_TRUST_PREBUILT=1
