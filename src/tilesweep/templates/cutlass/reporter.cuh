static void ts_str(const char* s) {
  std::putchar('"');
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') std::putchar('\\');
    std::putchar(*s);
  }
  std::putchar('"');
}

template <class Kernel, class Mainloop, class Epilogue>
void ts_report(int index, int align_a, int align_b, int capacity) {
  std::printf("{\"index\": %d, \"smem_bytes\": %d", index, int(Kernel::SharedStorageSize));
  std::printf(", \"threads_per_block\": %d", ts_threads<Kernel>::value);
  std::printf(", \"mainloop_smem_bytes\": %d", ts_tensors<Mainloop>::value);
  std::printf(", \"epilogue_smem_bytes\": %d", ts_tensors<Epilogue>::value);
  std::printf(", \"mainloop_shared_storage_bytes\": %d",
              int(sizeof(typename Mainloop::SharedStorage)));
  std::printf(", \"epilogue_shared_storage_bytes\": %d",
              int(sizeof(typename Epilogue::SharedStorage)));
  std::printf(", \"stages\": %d", ts_stages<Mainloop>::value);
  std::printf(", \"epilogue_stages\": %d", ts_stages_d<Epilogue>::value);
  std::printf(", \"epilogue_stages_c\": %d", ts_stages_c<Epilogue>::value);
  std::printf(", \"epilogue_tile\": [%d, %d]", ts_epi_tile<Epilogue>::m, ts_epi_tile<Epilogue>::n);
  std::printf(", \"alignment_a\": %d, \"alignment_b\": %d", align_a, align_b);
  std::printf(", \"builder_smem_capacity\": %d", capacity);
  std::printf(", \"cutlass_version\": \"%d.%d.%d\"", CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH);
  std::printf(", \"mainloop_schedule\": ");
  ts_str(ts_name<typename ts_schedule<Mainloop>::type>());
  std::printf(", \"mainloop_policy\": ");
  ts_str(ts_name<typename Mainloop::DispatchPolicy>());
  std::printf(", \"epilogue_policy\": ");
  ts_str(ts_name<typename Epilogue::DispatchPolicy>());
  std::printf("}\n");
}
