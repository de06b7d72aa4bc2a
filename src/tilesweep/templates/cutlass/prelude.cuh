#include <cstdio>
#include <cstring>
#include <type_traits>
#include "cutlass/cutlass.h"
#include "cutlass/version.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/arch.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

using TsProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;

template <class T> const char* ts_name() { return __PRETTY_FUNCTION__; }

template <class T, class = void> struct ts_stages { static constexpr int value = -1; };
template <class T>
struct ts_stages<T, std::void_t<decltype(T::DispatchPolicy::Stages)>> {
  static constexpr int value = T::DispatchPolicy::Stages;
};
template <class T, class = void> struct ts_stages_c { static constexpr int value = -1; };
template <class T>
struct ts_stages_c<T, std::void_t<decltype(T::DispatchPolicy::StagesC)>> {
  static constexpr int value = T::DispatchPolicy::StagesC;
};
template <class T, class = void> struct ts_stages_d { static constexpr int value = -1; };
template <class T>
struct ts_stages_d<T, std::void_t<decltype(T::DispatchPolicy::StagesD)>> {
  static constexpr int value = T::DispatchPolicy::StagesD;
};
template <class T, class = void> struct ts_tensors { static constexpr int value = -1; };
template <class T>
struct ts_tensors<T, std::void_t<typename T::TensorStorage>> {
  static constexpr int value = int(sizeof(typename T::TensorStorage));
};
template <class T, class = void> struct ts_epi_tile {
  static constexpr int m = -1, n = -1;
};
template <class T>
struct ts_epi_tile<T, std::void_t<typename T::EpilogueTile>> {
  static constexpr int m = int(cute::size<0>(typename T::EpilogueTile{}));
  static constexpr int n = int(cute::size<1>(typename T::EpilogueTile{}));
};
template <class T, class = void> struct ts_threads { static constexpr int value = -1; };
template <class T>
struct ts_threads<T, std::void_t<decltype(T::MaxThreadsPerBlock)>> {
  static constexpr int value = int(T::MaxThreadsPerBlock);
};
template <class T, class = void> struct ts_schedule { using type = void; };
template <class T>
struct ts_schedule<T, std::void_t<typename T::DispatchPolicy::Schedule>> {
  using type = typename T::DispatchPolicy::Schedule;
};
