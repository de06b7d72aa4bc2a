"""A console line per stage with its time left, from its jobs' durations (this run's, else
.snakemake/metadata's): Snakemake reports job counts, never a stage's time left."""

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TextIO

from snakemake_interface_logger_plugins.common import LogEvent

from tilesweep import package_data
from tilesweep.progress_stage import Stage, clock, jobs, recorded_job_times

PREFIX = "[tilesweep]"
# A stage's running line prints at most this often; its first finished job and its end always do.
EVERY_S = 30.0
# The events and lines of Snakemake's that Console speaks for (their file says which and why).
DATA_FILES = ("data/snakemake_lines.yaml",)
REPLACED = package_data.data_typed("tilesweep", DATA_FILES[0], "replaced", frozenset[LogEvent])
ROUND_LINES, CLOSING_LINES, STOPPING_LINES = (
    package_data.data_typed("tilesweep", DATA_FILES[0], key, tuple[str, ...])
    for key in ("round", "closing", "stopping")
)
RUN_FAILED = package_data.data_typed("tilesweep", DATA_FILES[0], "run_failed", str)
_EXIT = re.compile(r"returned non-zero exit status (-?\d+)")
_SIGNAL = re.compile(r"died with <Signals\.(\w+)")


def failure_cause(message: str) -> str:
    """Return why a job failed in a few words (exit status, signal, last line)."""
    if found := _EXIT.search(message):
        return f"exit status {found.group(1)}"
    if found := _SIGNAL.search(message):
        return f"killed by {found.group(1)}"
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    last = lines[-1] if lines else "no cause given"
    return last if len(last) <= 200 else last[:199] + "…"


class Console(logging.Handler):
    """Snakemake log handler that writes the stage lines to a stream."""

    def __init__(
        self,
        stream: TextIO,
        metadata: str | os.PathLike = ".snakemake/metadata",
        log_files: Iterable[str] = (),
        hidden: Iterable[str] = ("all",),
        every_s: float = EVERY_S,
        when_done: Mapping[str, Callable[[], list[str]]] | None = None,
    ):
        super().__init__()
        self.stream = stream
        self.metadata = metadata
        self.log_files = list(log_files)
        self.hidden = set(hidden)
        self.every_s = every_s
        # Lines a stage's end calls for (the answer card when the verdict is done), by rule.
        self.when_done = dict(when_done or {})
        self.stages: dict[str, Stage] = {}
        self.rule_of: dict[int, str] = {}
        self.starting: list[str] = []
        self.batch: set = set()  # job ids of the last "Execute N jobs" yet to log their start
        self.earlier: dict[str, list[float]] | None = None
        self.began: float | None = None
        self.most_at_once = 0  # the most jobs of any stages seen running at once
        self.failed = False
        self.broken = False
        # Failed jobs of this run: the cause Snakemake gave the last one, the failed rules.
        self.cause: str | None = None
        self.failures: list[str] = []
        self.stopped = False
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        """Update the stages from one Snakemake event; write the lines it calls for."""
        if self.broken:
            return
        try:
            with self._lock:
                for line in self.lines(record):
                    self.stream.write(f"{PREFIX} {line}\n")
                self.stream.flush()
        except Exception as err:  # a stream or event it cannot read: Snakemake's lines come back
            self.broken = True
            with contextlib.suppress(OSError, ValueError):
                self.stream.write(f"{PREFIX} stage lines stopped ({type(err).__name__}: {err})\n")

    def lines(self, record: logging.LogRecord) -> list[str]:
        """Return the console lines one event calls for (most call for none)."""
        event = getattr(record, "event", None)
        now = record.created
        if record.levelno >= logging.ERROR:
            self.failed = True
        if event == LogEvent.JOB_STARTED:
            self.batch = set(getattr(record, "jobs", ()))
        if self._job_exception(record):
            self.cause = failure_cause(record.getMessage())
            return []
        message = record.getMessage() if record.msg is not None else ""
        if self._closing(record, message) and not self.stopped:
            self.stopped = True  # after failed jobs, the first of Snakemake's closing errors
            return [self._stopped()]
        if event == LogEvent.JOB_INFO:
            self._start(record.rule_name, record.jobid, now)
            self.batch.discard(record.jobid)
            return self._announce(now) if not self.batch else []
        # A batch's jobs (a group job's too) have all logged their start by the next other event.
        out = [] if event in (LogEvent.SHELLCMD, LogEvent.GROUP_INFO) else self._announce(now)
        if event == LogEvent.RUN_INFO and isinstance(getattr(record, "stats", None), dict):
            out.append(self._plan(record.stats, now))
        elif event == LogEvent.JOB_FINISHED:
            out += self._end(record.job_id, now, failed=False)
        elif event == LogEvent.JOB_ERROR:
            out += [self._failure(record), *self._end(record.jobid, now, failed=True)]
        elif event == LogEvent.PROGRESS and record.done >= record.total:
            took = f" in {clock(now - self.began)}" if self.began is not None else ""
            out.append(f"all {record.total} jobs done{took}")
        return out

    def hides(self, record: logging.LogRecord) -> bool:
        """Return whether Snakemake's console handler should drop a record Console speaks for."""
        if self.broken:
            return False
        if record.levelno >= logging.ERROR:
            self.failed = True  # Snakemake's handler sees a record before this one does
        event = getattr(record, "event", None)
        if event in REPLACED or (event == LogEvent.RUN_INFO and hasattr(record, "stats")):
            return True
        if event == LogEvent.JOB_ERROR or self._job_exception(record):
            return True  # Console's `RULE failed` line says it in short
        message = record.getMessage() if record.msg is not None else ""
        if message in ROUND_LINES:
            return True
        if self._closing(record, message) or (self.failures and message == STOPPING_LINES[0]):
            return True  # Console's `stopped` line says it in short
        return not self.failed and message.startswith(CLOSING_LINES)

    def _closing(self, record: logging.LogRecord, message: str) -> bool:
        """Return whether a record is one of Snakemake's closing errors after failed jobs."""
        run_failed = getattr(record, "event", None) == LogEvent.ERROR and message.strip().endswith(
            RUN_FAILED
        )
        return bool(self.failures) and (message == STOPPING_LINES[1] or run_failed)

    def _job_exception(self, record: logging.LogRecord) -> bool:
        """Return whether a record is a running job's RuleException, not an error of the plan."""
        return (
            getattr(record, "event", None) == LogEvent.ERROR
            and getattr(record, "exception", None) == "RuleException"
            and any(stage.running for stage in self.stages.values())
        )

    def _failure(self, record: logging.LogRecord) -> str:
        """Return the line for a failed job: its rule, Snakemake's cause in short, its log."""
        rule = getattr(record, "rule_name", None) or self.rule_of.get(record.jobid, "a job")
        logs = [str(log) for log in getattr(record, "log", None) or []]
        cause, self.cause = f" ({self.cause})" if self.cause else "", None
        where = f"; its log: {', '.join(logs)}" if logs else ""
        line = f"{rule} failed{cause}{where}"
        self.failures.append(rule)
        return line

    def _stopped(self) -> str:
        """Return the run's closing line after failed jobs."""
        rules = sorted(set(self.failures))
        log = f" in {', '.join(self.log_files)}" if self.log_files else " in its log file"
        return (
            f"stopped: {jobs(len(self.failures))} failed ({', '.join(rules)}); the cause is the "
            f"job's `tilesweep:` line above where it printed one; Snakemake's own account{log}"
        )

    def _stage(self, name: str) -> Stage:
        return self.stages.setdefault(name, Stage(name))

    def _plan(self, stats: dict, now: float) -> str:
        self.began = now
        for name, count in stats.items():
            if name != "total":
                self._stage(name).total = int(count)
        shown = [s for s in self.stages.values() if s.name not in self.hidden]
        log = f"; Snakemake's full log: {', '.join(self.log_files)}" if self.log_files else ""
        return f"{jobs(stats.get('total', 0))} in {jobs(len(shown), 'stage')}{log}"

    def _start(self, rule: str, jobid: int, now: float) -> None:
        stage = self._stage(rule)
        self.rule_of[jobid] = rule
        stage.running[jobid] = now
        stage.at_once = max(stage.at_once, len(stage.running))
        running = sum(len(s.running) for s in self.stages.values())
        self.most_at_once = max(self.most_at_once, running)
        stage.total = max(stage.total, stage.ended + len(stage.running))
        if stage.began is None:
            stage.began = now
            if rule not in self.hidden:
                self.starting.append(rule)

    def _announce(self, now: float) -> list[str]:
        """Return a line per stage whose first jobs started in the last batch."""
        out = []
        for rule in self.starting:
            stage = self.stages[rule]
            if self.earlier is None:
                self.earlier = recorded_job_times(self.metadata)
            estimate = stage.estimate(now, self.earlier.get(rule))
            out.append(f"{rule} started: {jobs(stage.total)}, {estimate}")
            stage.last_line = now
        self.starting = []
        return out

    def _end(self, jobid: int, now: float, failed: bool) -> list[str]:
        rule = self.rule_of.get(jobid)
        if rule is None:
            return []
        stage = self.stages[rule]
        start = stage.running.pop(jobid, None)
        if start is None:
            return []  # an end already counted
        if failed:
            stage.failed += 1
        else:
            stage.durations.append(now - start)
        first = stage.ended == 1
        due = stage.last_line is None or now - stage.last_line >= self.every_s
        if rule in self.hidden or not (first or failed or due or stage.complete):
            return []
        stage.last_line = now
        elapsed = clock(now - stage.began) if stage.began is not None else "0s"
        if stage.complete:
            n = len(stage.durations)
            mean = f", mean job {clock(sum(stage.durations) / n)}" if n > 1 else ""
            failures = f" ({stage.failed} failed)" if stage.failed else ""
            head = f"{rule} done: {jobs(stage.total)}{failures} in {elapsed}{mean}"
        else:
            earlier = (self.earlier or {}).get(rule)
            head = f"{rule} {stage.count()} jobs, {elapsed} elapsed, {stage.estimate(now, earlier)}"
        whole = self.whole_run(now)
        out = [f"{head}; {self._others(rule)}" + (f"; {whole}" if whole else "")]
        if stage.complete and not stage.failed and rule in self.when_done:
            into = clock(now - self.began) if self.began is not None else "?"
            out += [f"{rule} ended {into} into the run:", *self.when_done.pop(rule)()]
        return out

    def whole_run(self, now: float) -> str:
        """Return the whole run's time left ('' when none), stages unknown named."""
        work, unknown = 0.0, []
        for stage in self.stages.values():
            if stage.name in self.hidden or stage.complete:
                continue
            times = stage.durations or (self.earlier or {}).get(stage.name)
            if not times:
                unknown.append(stage.name)
                continue
            work += stage.left(now, sum(times) / len(times))
        if not work and not unknown:
            return ""
        most = max(self.most_at_once, 1)
        text = f"whole run ~{clock(work / most)} left ({most} at once)" if work else "whole run"
        return text + (f", not counting {', '.join(unknown)} (no job time yet)" if unknown else "")

    def _others(self, rule: str) -> str:
        """Return the other stages in one clause: running, to come and done."""
        running, to_come, done = [], [], 0
        for stage in self.stages.values():
            if stage.name == rule or stage.name in self.hidden:
                continue
            if stage.complete:
                done += 1
            elif stage.began is None:
                to_come.append(f"{stage.name} ({stage.total})")
            else:
                running.append(f"{stage.name} {stage.count()}")
        parts = ["running " + ", ".join(running)] if running else []
        parts += ["to come " + ", ".join(to_come)] if to_come else []
        parts += [f"{done} done"] if done else []
        return "other stages: " + ("; ".join(parts) if parts else "none")


def attach(
    workflow,
    hidden: Iterable[str] = ("all",),
    when_done: Mapping[str, Callable[[], list[str]]] | None = None,
) -> Console | None:
    """Attach a Console for a real main-process run; return it (None otherwise)."""
    settings = workflow.output_settings
    if not workflow.is_main_process or settings is None or settings.dryrun:
        return None
    from snakemake.logging import logger

    shown = [h for h in logger.handlers if h.name == "DefaultStreamHandler"]
    stream = getattr(shown[0], "stream", sys.stderr) if shown else sys.stderr
    log_files = workflow.logger_manager.get_logfile()
    console = Console(stream, log_files=log_files, hidden=hidden, when_done=when_done)
    logger.addHandler(console)
    if not settings.verbose:
        for handler in shown:
            handler.addFilter(lambda record: not console.hides(record))
    return console
