namespace ${ns} {
using Tile = cute::Shape<cute::Int<${tile_m}>, cute::Int<${tile_n}>, cute::Int<${tile_k}>>;
using Cluster = cute::Shape<cute::Int<${cluster_m}>, cute::Int<${cluster_n}>, cute::_1>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    ${arch_tag}, ${opclass}, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
    float, float,
    ${elem_c}, cutlass::layout::RowMajor*, ${align_cd},
    ${elem_d}, cutlass::layout::RowMajor*, ${align_cd},
    ${epi_sched},
    cutlass::epilogue::fusion::LinearCombination<${elem_d}, float, ${elem_c}, float>
  >::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    ${arch_tag}, ${opclass},
    ${elem_ab}, cutlass::layout::RowMajor*, ${align_ab},
    ${elem_ab}, cutlass::layout::ColumnMajor*, ${align_ab},
    float, Tile, Cluster,
    ${stage_count},
    ${main_sched}
  >::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<TsProblemShape, Mainloop, Epilogue>;
#ifndef __CUDA_ARCH__
inline void report(int index) {
  ts_report<Kernel, Mainloop, Epilogue>(index, ${align_ab}, ${align_ab}, int(${capacity}));
}
#elif TS_DEVICE_CHECK
// Odr-uses the kernel body in the device pass so that its static_asserts are checked; the
// function is never called, so no kernel code is emitted.
__device__ inline void probe(Kernel::Params const& params, char* smem) {
  Kernel{}(params, smem);
}
#endif
}  // namespace ${ns}
