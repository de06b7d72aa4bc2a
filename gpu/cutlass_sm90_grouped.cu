// SM90 (H100/H200) FP8 ptr-array grouped GEMM, one CUTLASS kernel per tile: can it launch, is it
// right, how fast is it at MoE decode shapes.
//
// A and B are e4m3 (A row-major M x K per group, B column-major K x N per group, i.e. one weight
// matrix per expert), C and D are BF16 row-major, accumulation is FP32, D = alpha * A B + beta * C.
// For every tile and every tokens-per-expert value it runs can_implement, initialize and run,
// checks D against a naive reference GEMM (FP32 accumulation from the same FP8 inputs; relative L2
// error), times the kernel with cudaEvents (optionally replaying a CUDA graph), and prints one JSON
// line. A tile whose SharedStorageSize is above the device's opt-in limit passes can_implement and
// fails initialize (cudaFuncSetAttribute refuses the size, CUTLASS returns kErrorInternal): the
// "128x256x128_s5" tile forces that with an explicit 5-stage mainloop (280,576 bytes > 232,448).
//
// A tile may be asked for as NAME@SCHEDULE (cooperative or pingpong): the caller (tilesweep's
// decode job) names the schedule its launch check accounted, and a tile compiled here with another
// schedule prints a "constraint" record for each tokens value instead of being timed.
//
// Usage: cutlass_sm90_grouped [--tile=all|NAME[@SCHEDULE][,...]] [--groups=8]
//                             [--tokens=16,32,64,128] [--n=4096] [--k=6144] [--repeats=50]
//                             [--warmup=5] [--inner=10] [--beta=0] [--graph=0|1] [--seed=1]
//                             [--list]

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/version.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

// ------------------------------------------------------------------------------------------------
// Error checking

static void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, what, cudaGetErrorName(err),
                 cudaGetErrorString(err));
    std::printf("{\"error\": \"%s failed: %s\"}\n", what, cudaGetErrorName(err));
    std::exit(2);
  }
}
#define CUDA_CHECK(expr) cuda_check((expr), #expr, __FILE__, __LINE__)

// ------------------------------------------------------------------------------------------------
// Kernel configurations

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
using ElementA = cutlass::float_e4m3_t;
using ElementB = cutlass::float_e4m3_t;
using ElementC = cutlass::bfloat16_t;
using ElementD = cutlass::bfloat16_t;
using ElementAcc = float;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutC = cutlass::layout::RowMajor;
constexpr int kAlignAB = 16;  // 16 bytes of e4m3
constexpr int kAlignCD = 8;   // 16 bytes of bf16

struct Cooperative {
  using Mainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  static constexpr const char* name = "cooperative";
};

// The cooperative kernel requires tile M >= 128 (a static_assert in its body), so M = 64 tiles
// use the ping-pong schedule.
struct Pingpong {
  using Mainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
  static constexpr const char* name = "pingpong";
};

// Stages == 0 means StageCountAutoCarveout<sizeof(epilogue SharedStorage)>.
template <int TileM, int TileN, int TileK, int Stages, class Schedule>
struct Config {
  using Tile = Shape<Int<TileM>, Int<TileN>, Int<TileK>>;
  using Cluster = Shape<_1, _1, _1>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc,
      ElementC, LayoutC*, kAlignCD, ElementD, LayoutC*, kAlignCD,
      typename Schedule::Epilogue,
      cutlass::epilogue::fusion::LinearCombination<ElementD, ElementAcc, ElementC, ElementAcc>
    >::CollectiveOp;
  using StageCount = std::conditional_t<
      Stages == 0,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::collective::StageCount<Stages>>;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      ElementA, LayoutA*, kAlignAB, ElementB, LayoutB*, kAlignAB, ElementAcc,
      Tile, Cluster, StageCount, typename Schedule::Mainloop
    >::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop,
                                                      CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr const char* schedule = Schedule::name;
};

// ------------------------------------------------------------------------------------------------
// Options

struct Options {
  std::string tiles = "all";
  int groups = 8;
  std::vector<int> tokens = {16, 32, 64, 128};
  int n = 4096;
  int k = 6144;
  int repeats = 50;
  int warmup = 5;
  int inner = 10;
  float beta = 0.0f;
  bool graph = false;
  bool list = false;
  uint32_t seed = 1;
};

static std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

static int to_int(const std::string& key, const std::string& value) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || v < 0 || v > (1L << 30)) {
    std::fprintf(stderr, "bad value for --%s: '%s'\n", key.c_str(), value.c_str());
    std::exit(1);
  }
  return static_cast<int>(v);
}

static Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s [--tile=all|NAME[@SCHEDULE],...] [--groups=8] "
                  "[--tokens=16,32,64,128] "
                  "[--n=4096] [--k=6144] [--repeats=50] [--warmup=5] [--inner=10] [--beta=0] "
                  "[--graph=0|1] [--seed=1] [--list]\n", argv[0]);
      std::exit(0);
    }
    if (arg == "--list") { o.list = true; continue; }
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "unknown argument '%s' (try --help)\n", arg.c_str());
      std::exit(1);
    }
    std::string key = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
    if (key == "tile" || key == "tiles") o.tiles = value;
    else if (key == "groups") o.groups = to_int(key, value);
    else if (key == "tokens") {
      o.tokens.clear();
      for (auto& t : split(value, ',')) o.tokens.push_back(to_int(key, t));
    }
    else if (key == "n") o.n = to_int(key, value);
    else if (key == "k") o.k = to_int(key, value);
    else if (key == "repeats") o.repeats = std::max(1, to_int(key, value));
    else if (key == "warmup") o.warmup = to_int(key, value);
    else if (key == "inner") o.inner = std::max(1, to_int(key, value));
    else if (key == "beta") o.beta = std::strtof(value.c_str(), nullptr);
    else if (key == "graph") o.graph = to_int(key, value) != 0;
    else if (key == "seed") o.seed = static_cast<uint32_t>(to_int(key, value));
    else {
      std::fprintf(stderr, "unknown option --%s (try --help)\n", key.c_str());
      std::exit(1);
    }
  }
  if (o.groups < 1 || o.n < 1 || o.k < 1 || o.tokens.empty()) {
    std::fprintf(stderr, "groups, n, k and tokens must be positive\n");
    std::exit(1);
  }
  return o;
}

// ------------------------------------------------------------------------------------------------
// Device buffers, random fill and reference GEMM

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) {
    if (n) CUDA_CHECK(cudaMalloc(&ptr, n * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);  // teardown: an error here cannot be acted on
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const T* host, size_t n) {
    CUDA_CHECK(cudaMemcpy(ptr, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
};

__host__ __device__ inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}

// Values with magnitude in [0.125, 2) and a random sign: never zero.
template <class T>
__global__ void fill_random(T* out, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = hash32(static_cast<uint32_t>(i) ^ hash32(seed + static_cast<uint32_t>(i >> 32)));
    float mag = 0.125f + 1.875f * float(h & 0xffffffU) / float(0x1000000);
    out[i] = T((h >> 31) ? -mag : mag);
  }
}

template <class T>
static void fill(DeviceBuffer<T>& buf, uint32_t seed) {
  if (!buf.count) return;
  fill_random<<<1024, 256>>>(buf.ptr, buf.count, seed);
  CUDA_CHECK(cudaGetLastError());
}

// ref[g][m][n] = alpha * sum_k A[g][m][k] * B[g][n][k] + beta * C[g][m][n], all in FP32.
__global__ void reference_gemm(const ElementA* A, const ElementB* B, const ElementC* C, float* ref,
                               int groups, int M, int N, int K, float alpha, float beta) {
  size_t total = size_t(groups) * M * N;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < total;
       idx += size_t(gridDim.x) * blockDim.x) {
    int n = int(idx % N);
    int m = int((idx / N) % M);
    int g = int(idx / (size_t(N) * M));
    const ElementA* a = A + (size_t(g) * M + m) * K;
    const ElementB* b = B + (size_t(g) * N + n) * K;
    float acc = 0.f;
    for (int kk = 0; kk < K; ++kk) acc += float(a[kk]) * float(b[kk]);
    ref[idx] = alpha * acc + beta * float(C[idx]);
  }
}

// ------------------------------------------------------------------------------------------------
// One grouped problem (all groups M x N x K), its buffers and reference

struct Problem {
  int groups, M, N, K;
  float alpha = 1.f, beta = 0.f;
  DeviceBuffer<ElementA> A;
  DeviceBuffer<ElementB> B;
  DeviceBuffer<ElementC> C;
  DeviceBuffer<ElementD> D;
  DeviceBuffer<float> ref;
  std::vector<float> ref_host;
  DeviceBuffer<typename ProblemShape::UnderlyingProblemShape> shapes;
  std::vector<typename ProblemShape::UnderlyingProblemShape> shapes_host;
  DeviceBuffer<const ElementA*> ptr_A;
  DeviceBuffer<const ElementB*> ptr_B;
  DeviceBuffer<const ElementC*> ptr_C;
  DeviceBuffer<ElementD*> ptr_D;

  Problem(int g, int m, int n, int k, float beta_, uint32_t seed)
      : groups(g), M(m), N(n), K(k), beta(beta_),
        A(size_t(g) * m * k), B(size_t(g) * n * k), C(size_t(g) * m * n), D(size_t(g) * m * n),
        ref(size_t(g) * m * n), shapes(g), ptr_A(g), ptr_B(g), ptr_C(g), ptr_D(g) {
    fill(A, seed * 4 + 1);
    fill(B, seed * 4 + 2);
    fill(C, seed * 4 + 3);
    shapes_host.assign(g, {m, n, k});
    shapes.upload(shapes_host.data(), g);
    std::vector<const ElementA*> pa(g);
    std::vector<const ElementB*> pb(g);
    std::vector<const ElementC*> pc(g);
    std::vector<ElementD*> pd(g);
    for (int i = 0; i < g; ++i) {
      pa[i] = A.ptr + size_t(i) * m * k;
      pb[i] = B.ptr + size_t(i) * n * k;
      pc[i] = C.ptr + size_t(i) * m * n;
      pd[i] = D.ptr + size_t(i) * m * n;
    }
    ptr_A.upload(pa.data(), g);
    ptr_B.upload(pb.data(), g);
    ptr_C.upload(pc.data(), g);
    ptr_D.upload(pd.data(), g);
    reference_gemm<<<1024, 256>>>(A.ptr, B.ptr, C.ptr, ref.ptr, g, m, n, k, alpha, beta);
    CUDA_CHECK(cudaGetLastError());
    ref_host.resize(ref.count);
    CUDA_CHECK(cudaMemcpy(ref_host.data(), ref.ptr, ref.count * sizeof(float),
                          cudaMemcpyDeviceToHost));
    // The GEMMs run on a non-blocking stream, which does not wait for the legacy stream.
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Relative L2 error of D against the reference.
  double rel_err() const {
    std::vector<ElementD> d(D.count);
    CUDA_CHECK(cudaMemcpy(d.data(), D.ptr, D.count * sizeof(ElementD), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      double diff = double(float(d[i])) - double(ref_host[i]);
      num += diff * diff;
      den += double(ref_host[i]) * double(ref_host[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  }

  void clear_output() {
    CUDA_CHECK(cudaMemset(D.ptr, 0, D.count * sizeof(ElementD)));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  double flops() const { return 2.0 * groups * double(M) * N * K; }

  double bytes() const {
    double ab = double(groups) * (double(M) * K + double(N) * K);  // 1 byte per e4m3
    double cd = double(groups) * M * N * 2.0 * (beta != 0.f ? 2 : 1);
    return ab + cd;
  }
};

// ------------------------------------------------------------------------------------------------
// Running one tile

struct Device {
  int id = 0;
  cudaDeviceProp prop{};
  int sm_count = 0;
  cudaStream_t stream = nullptr;
};

struct Timing {
  double median = 0, p10 = 0, p90 = 0;
};

static double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double pos = q * double(v.size() - 1);
  size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

// Times `inner` back-to-back launches per repeat (or one replay of a graph holding them).
template <class Gemm>
static Timing time_gemm(Gemm& gemm, const Options& o, const Device& dev, cutlass::Status& st) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < o.warmup && st == cutlass::Status::kSuccess; ++i) st = gemm.run(dev.stream);
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  if (o.graph && st == cutlass::Status::kSuccess) {
    CUDA_CHECK(cudaStreamBeginCapture(dev.stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < o.inner && st == cutlass::Status::kSuccess; ++i) st = gemm.run(dev.stream);
    CUDA_CHECK(cudaStreamEndCapture(dev.stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, dev.stream));  // warm the graph
  }
  std::vector<double> ms;
  for (int r = 0; r < o.repeats && st == cutlass::Status::kSuccess; ++r) {
    CUDA_CHECK(cudaEventRecord(start, dev.stream));
    if (exec) {
      CUDA_CHECK(cudaGraphLaunch(exec, dev.stream));
    } else {
      for (int i = 0; i < o.inner && st == cutlass::Status::kSuccess; ++i) st = gemm.run(dev.stream);
    }
    CUDA_CHECK(cudaEventRecord(stop, dev.stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(double(elapsed) / o.inner);
  }
  if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
  if (graph) CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  Timing t;
  if (!ms.empty()) t = {percentile(ms, 0.5), percentile(ms, 0.1), percentile(ms, 0.9)};
  return t;
}

static void print_json_str(const char* key, const char* value) {
  std::printf(", \"%s\": \"", key);
  for (const char* c = value; *c; ++c) {
    if (*c == '"' || *c == '\\') std::putchar('\\');
    std::putchar(*c);
  }
  std::putchar('"');
}

template <class Cfg>
static void run_tile(const char* name, Problem& p, const Options& o, const Device& dev) {
  using Gemm = typename Cfg::Gemm;
  using Kernel = typename Cfg::Kernel;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideC = typename Kernel::InternalStrideC;
  using StrideD = typename Kernel::InternalStrideD;

  std::vector<StrideA> sa(p.groups, cutlass::make_cute_packed_stride(StrideA{}, {p.M, p.K, 1}));
  std::vector<StrideB> sb(p.groups, cutlass::make_cute_packed_stride(StrideB{}, {p.N, p.K, 1}));
  std::vector<StrideC> sc(p.groups, cutlass::make_cute_packed_stride(StrideC{}, {p.M, p.N, 1}));
  std::vector<StrideD> sd(p.groups, cutlass::make_cute_packed_stride(StrideD{}, {p.M, p.N, 1}));
  DeviceBuffer<StrideA> dsa(p.groups);
  DeviceBuffer<StrideB> dsb(p.groups);
  DeviceBuffer<StrideC> dsc(p.groups);
  DeviceBuffer<StrideD> dsd(p.groups);
  dsa.upload(sa.data(), p.groups);
  dsb.upload(sb.data(), p.groups);
  dsc.upload(sc.data(), p.groups);
  dsd.upload(sd.data(), p.groups);

  cutlass::KernelHardwareInfo hw;
  hw.device_id = dev.id;
  hw.sm_count = dev.sm_count;

  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {p.groups, p.shapes.ptr, p.shapes_host.data()},
      {p.ptr_A.ptr, dsa.ptr, p.ptr_B.ptr, dsb.ptr},
      {{}, p.ptr_C.ptr, dsc.ptr, p.ptr_D.ptr, dsd.ptr},
      hw};
  args.epilogue.thread.alpha = p.alpha;
  args.epilogue.thread.beta = p.beta;

  Gemm gemm;
  DeviceBuffer<uint8_t> workspace(Gemm::get_workspace_size(args));
  p.clear_output();

  cutlass::Status can = gemm.can_implement(args);
  cutlass::Status init = cutlass::Status::kErrorNotSupported;
  cutlass::Status run = cutlass::Status::kErrorNotSupported;
  const char* init_str = "skipped";
  const char* run_str = "skipped";
  cudaError_t launch_err = cudaSuccess;
  double err = -1;
  Timing t;
  if (can == cutlass::Status::kSuccess) {
    init = gemm.initialize(args, workspace.ptr, dev.stream);
    init_str = cutlassGetStatusString(init);
  }
  if (init == cutlass::Status::kSuccess) {
    run = gemm.run(dev.stream);
    launch_err = cudaGetLastError();
    if (run == cutlass::Status::kSuccess && launch_err == cudaSuccess) {
      launch_err = cudaStreamSynchronize(dev.stream);
    }
    run_str = launch_err == cudaSuccess ? cutlassGetStatusString(run) : "cuda error";
    if (launch_err != cudaSuccess) {
      std::fprintf(stderr, "%s: kernel failed: %s\n", name, cudaGetErrorString(launch_err));
    }
  }
  bool ran = run == cutlass::Status::kSuccess && launch_err == cudaSuccess;
  if (ran) {
    err = p.rel_err();
    cutlass::Status timed = cutlass::Status::kSuccess;
    t = time_gemm(gemm, o, dev, timed);
    if (timed != cutlass::Status::kSuccess) run_str = cutlassGetStatusString(timed);
  }

  int smem = int(Kernel::SharedStorageSize);
  int optin = int(dev.prop.sharedMemPerBlockOptin);
  std::printf("{\"tile\": \"%s\"", name);
  print_json_str("schedule", Cfg::schedule);
  std::printf(", \"stages\": %d", int(Kernel::CollectiveMainloop::DispatchPolicy::Stages));
  std::printf(", \"smem_bytes\": %d, \"smem_optin\": %d, \"fits\": %s", smem, optin,
              smem <= optin ? "true" : "false");
  std::printf(", \"groups\": %d, \"tokens\": %d, \"n\": %d, \"k\": %d, \"beta\": %g", p.groups,
              p.M, p.N, p.K, double(p.beta));
  print_json_str("can_implement", cutlassGetStatusString(can));
  print_json_str("initialize", init_str);
  print_json_str("run", run_str);
  print_json_str("cuda_error", cudaGetErrorName(launch_err));
  if (ran) {
    std::printf(", \"rel_err\": %.3e, \"passed\": %s", err, err < 1e-2 ? "true" : "false");
    std::printf(", \"time_ms\": {\"median\": %.5f, \"p10\": %.5f, \"p90\": %.5f}", t.median, t.p10,
                t.p90);
    double s = t.median * 1e-3;
    std::printf(", \"tflops\": %.3f, \"gbps\": %.1f", s > 0 ? p.flops() / s * 1e-12 : 0.0,
                s > 0 ? p.bytes() / s * 1e-9 : 0.0);
  } else {
    std::printf(", \"rel_err\": null, \"passed\": null, \"time_ms\": null");
  }
  std::printf(", \"graph\": %s, \"inner\": %d, \"repeats\": %d", o.graph ? "true" : "false",
              o.inner, o.repeats);
  print_json_str("device", dev.prop.name);
  std::printf(", \"cc\": \"%d.%d\", \"cutlass_version\": \"%d.%d.%d\"}\n", dev.prop.major,
              dev.prop.minor, CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH);
  std::fflush(stdout);
}

// ------------------------------------------------------------------------------------------------
// Tile table

struct TileEntry {
  const char* name;
  const char* schedule;
  void (*run)(const char*, Problem&, const Options&, const Device&);
};

template <class Cfg>
constexpr TileEntry entry(const char* name) {
  return {name, Cfg::schedule, run_tile<Cfg>};
}

// A tile's schedule follows tilesweep's kernel_schedule("sm_90", tile_m): ping-pong below 128
// rows, cooperative from 128 (the decode job asks for each tile with that schedule).
static const TileEntry kTiles[] = {
    entry<Config<64, 128, 128, 0, Pingpong>>("64x128x128"),
    entry<Config<128, 128, 128, 0, Cooperative>>("128x128x128"),
    entry<Config<128, 128, 256, 0, Cooperative>>("128x128x256"),
    entry<Config<128, 256, 128, 0, Cooperative>>("128x256x128"),
    entry<Config<256, 128, 128, 0, Cooperative>>("256x128x128"),
    // 5 explicit stages: SharedStorageSize 280,576 > 232,448, so initialize must fail.
    entry<Config<128, 256, 128, 5, Cooperative>>("128x256x128_s5"),
};

// One tile asked for, and the schedule asked for with it ("" when none was named).
struct Selected {
  const TileEntry* tile;
  std::string schedule;
};

static std::vector<Selected> select_tiles(const std::string& spec) {
  std::vector<Selected> out;
  for (auto& item : split(spec, ',')) {
    size_t at = item.find('@');
    std::string want = item.substr(0, at);
    std::string schedule = at == std::string::npos ? "" : item.substr(at + 1);
    bool found = false;
    for (auto& t : kTiles) {
      if (want == "all" || want == t.name) {
        out.push_back({&t, schedule});
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "unknown tile '%s' (try --list)\n", want.c_str());
      std::exit(1);
    }
  }
  return out;
}

// The record of a tile asked for with a schedule it is not compiled with: nothing is run.
static void print_schedule_mismatch(const Selected& s, const Problem& p, const Device& dev) {
  std::printf("{\"tile\": \"%s\"", s.tile->name);
  print_json_str("schedule", s.schedule.c_str());
  print_json_str("compiled_schedule", s.tile->schedule);
  std::printf(", \"groups\": %d, \"tokens\": %d, \"n\": %d, \"k\": %d", p.groups, p.M, p.N,
              p.K);
  std::printf(", \"error\": \"asked for the %s schedule; this program compiles %s with %s\"",
              s.schedule.c_str(), s.tile->name, s.tile->schedule);
  print_json_str("status", "constraint");
  print_json_str("device", dev.prop.name);
  std::printf(", \"cutlass_version\": \"%d.%d.%d\"}\n", CUTLASS_MAJOR, CUTLASS_MINOR,
              CUTLASS_PATCH);
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.list) {
    for (auto& t : kTiles) std::printf("%s\n", t.name);
    return 0;
  }
  auto tiles = select_tiles(o.tiles);

  Device dev;
  CUDA_CHECK(cudaGetDevice(&dev.id));
  CUDA_CHECK(cudaGetDeviceProperties(&dev.prop, dev.id));
  if (dev.prop.major != 9 || dev.prop.minor != 0) {
    std::printf("{\"error\": \"needs an SM90 GPU (built for sm_90a), found cc %d.%d\"",
                dev.prop.major, dev.prop.minor);
    print_json_str("device", dev.prop.name);
    std::printf("}\n");
    return 3;
  }
  dev.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev.id);
  CUDA_CHECK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));

  for (int m : o.tokens) {
    if (m < 1) continue;
    Problem p(o.groups, m, o.n, o.k, o.beta, o.seed + uint32_t(m));
    for (auto& s : tiles) {
      if (!s.schedule.empty() && s.schedule != s.tile->schedule) {
        print_schedule_mismatch(s, p, dev);
      } else {
        s.tile->run(s.tile->name, p, o, dev);
      }
    }
  }
  CUDA_CHECK(cudaStreamDestroy(dev.stream));
  return 0;
}
