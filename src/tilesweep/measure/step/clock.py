"""The clock the measured whole step runs under: per-part times or launches of one step."""

import contextlib
import time


class PartClock:
    """Per-part times and launches of one step: `eager`, `graph`, `count` or `off`."""

    def __init__(self, torch, cuda: bool, mode: str = "eager", counter=None):
        self.torch, self.cuda, self.mode, self.counter = torch, cuda, mode, counter
        self.spans: list[tuple[str, object, object]] = []

    def _mark(self):
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True, external=self.mode == "graph")
            event.record()
            return event
        return time.perf_counter()

    @contextlib.contextmanager
    def part(self, name: str):
        if self.mode == "off":
            yield
            return
        if self.mode == "count":
            outer, self.counter.part = self.counter.part, name
            try:
                yield
            finally:
                self.counter.part = outer
            return
        start = self._mark()
        yield
        self.spans.append((name, start, self._mark()))

    def add_launches(self, n: int) -> None:
        """Count n launches made outside torch's dispatcher (Triton kernels) in this part."""
        if self.mode == "count":
            self.counter.add(n)

    def collect(self) -> dict[str, float]:
        """Return ms per part; reset, except graph events, which replays reuse."""
        if self.cuda:
            self.torch.cuda.synchronize()
        out: dict[str, float] = {}
        for name, start, end in self.spans:
            ms = start.elapsed_time(end) if self.cuda else (end - start) * 1e3
            out[name] = out.get(name, 0.0) + ms
        if self.mode != "graph":
            self.spans = []
        return out
