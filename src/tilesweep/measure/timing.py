"""Timing with device events (GPU) or a monotonic clock (CPU); medians and spreads."""

import math
import statistics
import threading
import time
from collections.abc import Callable


def percentile(values: list[float], q: float) -> float:
    """Return the nearest-rank q-quantile of values (NaN for none): every p10/p90 of the project."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summarize(samples_ms: list[float]) -> dict:
    """Return the median, p10 and p90 of timing samples in milliseconds."""
    return {
        "time_ms": statistics.median(samples_ms),
        "time_p10_ms": percentile(samples_ms, 0.1),
        "time_p90_ms": percentile(samples_ms, 0.9),
        "repeats": len(samples_ms),
    }


def time_cpu(fn: Callable[[], object], repeats: int, warmup: int) -> list[float]:
    """Return per-call wall times in ms of fn on the CPU, after warm-up calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def time_gpu(fns: list[Callable[[], object]], repeats: int, warmup: int) -> tuple[list[float], str]:
    """Return ms per call over fronted graph replays of `fns`, and the method."""
    import torch

    for _ in range(max(1, warmup)):
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    method = "cuda-graph"
    try:
        replay = capture_graph(fns).replay
    except Exception:  # some kernels cannot be captured: time eager launches instead
        method = "eager-events"

        def replay() -> None:
            for fn in fns:
                fn()

    samples = time_events(replay, repeats, fronted=method == "cuda-graph")
    return [ms / len(fns) for ms in samples], method


def capture_graph(fns: list[Callable[[], object]], capture_error_mode: str = "global"):
    """Return a CUDAGraph of calls, captured after a side-stream warm-up."""
    import torch

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph, capture_error_mode=capture_error_mode):
        for fn in fns:
            fn()
    return graph


# A GPU-side wait (~1 ms on an H200) before a timed replay, so the CPU's launch is not timed.
FRONT_CYCLES = 2_000_000


def front() -> None:
    """Queue the GPU-side wait (FRONT_CYCLES) on the current stream."""
    import torch

    torch.cuda._sleep(FRONT_CYCLES)


def time_events(fn: Callable[[], object], repeats: int, fronted: bool = False) -> list[float]:
    """Return ms per call of fn between CUDA events (`fronted`: graph replays only)."""
    import torch

    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if fronted:
            front()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def calls_to_fill(single_ms: float, fill_ms: float, max_calls: int) -> int:
    """Return how many calls one replay holds to last about fill_ms (1 to max_calls)."""
    if single_ms <= 0:
        return max_calls
    return max(1, min(max_calls, math.ceil(fill_ms / single_ms)))


def time_call(
    fn, repeats: int, warmup: int, graph: bool, max_calls: int = 1, fill_ms: float = 1.0
) -> dict:
    """Return median/p10/p90 ms of fn: graph replays or events on a GPU, else the clock."""
    import torch

    calls = 1
    if not torch.cuda.is_available():
        samples, method = time_cpu(fn, repeats, warmup), "cpu-perf-counter"
    elif graph:
        if max_calls > 1:  # size the replay from a few one-call replays
            probe, _ = time_gpu([fn], 3, warmup)
            calls = calls_to_fill(statistics.median(probe), fill_ms, max_calls)
            warmup = 1
        samples, method = time_gpu([fn] * calls, repeats, warmup)
    else:
        for _ in range(warmup):
            fn()
        samples, method = time_events(fn, repeats), "events"
    return {**summarize(samples), "timing": method, "calls_per_replay": calls}


class PowerSampler:
    """Sample GPU power, SM clock and throttle reasons through NVML while a region runs."""

    def __init__(self, index: int = 0, period_s: float = 0.01):
        self.index, self.period_s = index, period_s
        self.samples: list[tuple[float, float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000
        except Exception:  # no NVML: no samples, and the row says so
            self._nvml = None
            self.limit_w = None

    def _run(self) -> None:
        nv, h = self._nvml, self._handle
        idle = getattr(nv, "nvmlClocksThrottleReasonGpuIdle", 1)
        while not self._stop.is_set():
            try:
                power = nv.nvmlDeviceGetPowerUsage(h) / 1000
                clock = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
                reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h) & ~idle
                self.samples.append((power, clock, reasons))
            except Exception:
                return
            self._stop.wait(self.period_s)

    def __enter__(self) -> "PowerSampler":
        if self._handle is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def summary(self) -> dict:
        """Return mean power, fraction of the limit, median SM clock and throttled-sample share."""
        if not self.samples:
            none = dict.fromkeys(("power_w", "power_frac", "sm_clock_mhz", "throttled_frac"))
            return {**none, "power_samples": 0}
        power = statistics.mean(s[0] for s in self.samples)
        return {
            "power_w": round(power, 1),
            "power_frac": round(power / self.limit_w, 3) if self.limit_w else None,
            "sm_clock_mhz": statistics.median(s[1] for s in self.samples),
            "throttled_frac": round(sum(1 for s in self.samples if s[2]) / len(self.samples), 3),
            "power_samples": len(self.samples),
        }
