"""The tuning worker's journal and heartbeat, and its supervisor: a worker past an item's time limit
is killed (a timeout), one that dies journals a crash, and a new one resumes after the last
journalled item."""

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tilesweep.columns import Status
from tilesweep.io import write_text

SCREEN, FINAL = "screen", "final"


def item_key(phase: str, problem: int, what: str) -> str:
    """Return the journal key of one work item."""
    return f"{phase}|{problem}|{what}"


def read_journal(path: str | Path) -> dict[str, dict]:
    """Return the journal's finished items by key (.gz too; a half-written last line ignored)."""
    done, path = {}, Path(path)
    if not path.exists():
        return done
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[rec["key"]] = rec
    return done


def append_journal(path: str | Path, rec: dict) -> None:
    """Append one finished item to the journal, durably."""
    with open(path, "a") as stream:
        stream.write(json.dumps(rec, sort_keys=True) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


class Yield(Exception):
    """Raised when a worker has journalled its quota of items: it exits for a fresh one."""


class Journal:
    """The worker's journal: appends items and, with a quota, ends the worker after that many."""

    def __init__(self, path: str | Path, quota: int = 0):
        self.path, self.quota, self.items = path, quota, 0

    def append(self, rec: dict, counts: bool = True) -> None:
        """Journal one finished item; raise Yield once the quota is spent."""
        append_journal(self.path, {**rec, "pid": os.getpid(), "ended": round(time.time(), 3)})
        self.items += counts
        if counts and self.quota and self.items >= self.quota:
            raise Yield


def beat(path: str | Path, key: str) -> None:
    """Record which item the worker starts now (atomically replaced)."""
    write_text(path, json.dumps({"key": key, "time": time.time()}))


def supervise(spec: dict, work_dir: Path, log, env: dict | None = None, restarts: int = 50):
    """Run the worker until every item is journalled; return the journal's records."""
    work_dir.mkdir(parents=True, exist_ok=True)
    spec_path, journal, heartbeat = (work_dir / n for n in ("spec.json", "journal.jsonl", "beat"))
    write_text(spec_path, json.dumps(spec, sort_keys=True, indent=1))
    cmd = [sys.executable, "-m", "tilesweep.fused_moe.tune_worker", str(spec_path)]
    cmd += [str(journal), str(heartbeat)]
    attempt = 0
    while attempt < restarts:
        heartbeat.unlink(missing_ok=True)
        proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})})
        status = _watch(proc, heartbeat, spec)
        key = _last_beat(heartbeat).get("key")
        if status == "done":
            return read_journal(journal)
        if status == "yield":  # its quota of items is journalled: a fresh worker goes on
            continue
        attempt += 1
        if key in (None, "done") and status == "exit":
            raise RuntimeError(f"the tuning worker exited with {proc.returncode} before starting")
        if key == "compile":
            raise RuntimeError(f"compiling the search space: worker {status} ({proc.returncode})")
        if key not in read_journal(journal):
            kind = Status.TIMEOUT if status == "timeout" else Status.CRASH
            phase, problem, what = key.split("|", 2)
            reason = f"worker {status} (exit {proc.returncode}) during this item, attempt {attempt}"
            rec = {"key": key, "phase": phase, "problem": int(problem), "what": what}
            append_journal(journal, {**rec, "status": str(kind), "reason": reason})
        log.warning("worker %s at %s; restarting", status, key)
    raise RuntimeError(f"the tuning worker failed {restarts} times")


def _last_beat(heartbeat: Path) -> dict:
    """Return the worker's last heartbeat: the item it started and when ({} before its first)."""
    try:
        return json.loads(heartbeat.read_text())
    except (OSError, ValueError):
        return {}


def _watch(proc, heartbeat: Path, spec: dict) -> str:
    """Return how the worker ended: 'done', 'yield', 'exit' (died) or 'timeout' (killed)."""
    while True:
        try:
            rc = proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            rc = None
        if rc is not None:
            ended = _last_beat(heartbeat).get("key") if rc == 0 else None
            return ended if ended in ("done", "yield") else "exit"
        beat = _last_beat(heartbeat)
        if beat.get("key", "done") in ("done", "yield"):  # none yet, or the worker is exiting
            continue
        limit = spec["compile_timeout_s"] if beat["key"] == "compile" else spec["config_timeout_s"]
        if time.time() - beat["time"] > limit:
            proc.kill()
            proc.wait()
            return "timeout"
