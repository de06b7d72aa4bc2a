"""A stage's progress as progress.Console counts it: jobs ended and running, and its time left."""

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field


def clock(seconds: float) -> str:
    """Return a duration as the console writes it: `<1s`, `42s`, `3m10s`, `1h05m`."""
    if seconds < 1:
        return "<1s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def jobs(n: int, noun: str = "job") -> str:
    """Return `1 job` or `n jobs` (or another noun)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def time_left(pending: int, running_ages: Iterable[float], mean_s: float, at_once: int) -> float:
    """Return a stage's seconds left, over the most of its jobs seen at once."""
    work = pending * mean_s + sum(max(mean_s - age, 0.0) for age in running_ages)
    return work / max(at_once, 1)


def recorded_job_times(metadata: str | os.PathLike) -> dict[str, list[float]]:
    """Return per rule the job durations `.snakemake/metadata` recorded."""
    seen: set[tuple[str, float, float]] = set()
    times: dict[str, list[float]] = {}
    try:
        entries = list(os.scandir(metadata))
    except OSError:
        return times
    for entry in entries:
        try:
            with open(entry.path) as handle:
                record = json.load(handle)
            rule, start, end = record["rule"], float(record["starttime"]), float(record["endtime"])
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if record.get("incomplete") or end < start or (rule, start, end) in seen:
            continue
        seen.add((rule, start, end))
        times.setdefault(rule, []).append(end - start)
    return times


@dataclass
class Stage:
    """One rule's jobs in this run: how many, which run since when, how long the finished took."""

    name: str
    total: int = 0
    durations: list[float] = field(default_factory=list)
    failed: int = 0
    running: dict[int, float] = field(default_factory=dict)  # jobid -> start time
    at_once: int = 0
    began: float | None = None
    last_line: float | None = None

    @property
    def ended(self) -> int:
        """Return how many of its jobs finished, failed ones included."""
        return len(self.durations) + self.failed

    @property
    def complete(self) -> bool:
        """Return whether every planned job of the stage has ended."""
        return self.ended >= self.total and not self.running

    def count(self) -> str:
        """Return `ended/total`, with the failed ones named."""
        failed = f" ({self.failed} failed)" if self.failed else ""
        return f"{self.ended}/{self.total}{failed}"

    def estimate(self, now: float, earlier: list[float] | None) -> str:
        """Return `~T left (why)`, else `no estimate yet`."""
        if self.durations:
            times, where = self.durations, "this run"
        elif earlier:
            times, where = earlier, "an earlier run"
        else:
            return "no estimate yet"
        mean = sum(times) / len(times)
        left = self.left(now, mean, self.at_once)
        return f"~{clock(left)} left (mean job {clock(mean)} in {where}, {self.at_once} at once)"

    def left(self, now: float, mean_s: float, at_once: int = 1) -> float:
        """Return the seconds the stage has left at mean_s a job, over at_once jobs (time_left)."""
        pending = max(self.total - self.ended - len(self.running), 0)
        return time_left(pending, [now - t for t in self.running.values()], mean_s, at_once)
