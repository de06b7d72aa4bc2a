"""The machine a sweep is planned for (`device`): `auto` asks nvidia-smi once (a failure is an
error, never a quiet CPU plan), `cpu`, or `<hardware>x<count>` for a cluster's nodes; and which
conf/hardware entry a device is, from the names devices report (`device_names:`)."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilesweep.errors import ConfigError
from tilesweep.provenance import GpuQueryError, query_gpus

if TYPE_CHECKING:
    from tilesweep.settings import HardwareSpec

_NAMED = re.compile(r"^(?P<hardware>[a-z0-9_]+)x(?P<count>[0-9]+)$")
_ALLOWED = "auto, cpu, or <hardware>x<count> such as h200x8"


@dataclass(frozen=True)
class Device:
    """The GPUs a sweep plans jobs for (none on a CPU plan), and how they were decided."""

    gpus: tuple[str, ...]  # nvidia-smi names, one per GPU
    drivers: tuple[str, ...]  # driver versions the query saw (none for a named machine)
    setting: str  # the `device` value that decided it
    how: str = ""  # how `auto` decided, said once when the Snakefile is read

    def summary(self) -> str:
        """Return one line saying what the sweep is planned for and why."""
        what = f"{len(self.gpus)} x {self.gpus[0]}" if self.gpus else "the CPU (no GPU jobs)"
        return f"planned for {what}: device={self.setting}{self.how}"

    def identity(self) -> str:
        """Return a stable identity of the device, e.g. 'cuda:NVIDIA H200 x8' (a rule param)."""
        if self.gpus:
            return f"cuda:{self.gpus[0]} x{len(self.gpus)}"
        return f"cpu:{platform.processor() or platform.machine()}"


# The most GPUs one machine (one node of a cluster profile) is planned with.
MAX_GPUS = 1024


def resolve(setting: object, catalog: dict[str, HardwareSpec]) -> Device:
    """Return the Device a `device` setting names; raise ConfigError in one line otherwise."""
    if not isinstance(setting, str):
        raise ConfigError(f"device={setting!r}: expected a string: {_ALLOWED}")
    if setting == "cpu":
        return Device((), (), setting)
    if setting == "auto":
        try:
            found = query_gpus()
        except GpuQueryError as err:
            raise ConfigError(
                f"device=auto: {err}; set device=cpu, or name the machine (device=h200x8)"
            ) from None
        how = " (nvidia-smi answered)" if found else " (no nvidia-smi on PATH)"
        names, drivers = tuple(n for n, _ in found), tuple(sorted({d for _, d in found}))
        return Device(names, drivers, setting, how)
    named = _NAMED.match(setting)
    if named is None:
        raise ConfigError(f"device={setting!r}: expected {_ALLOWED}")
    hardware, count = named["hardware"], int(named["count"])
    if hardware not in catalog:
        raise ConfigError(
            f"device={setting!r}: no conf/hardware/{hardware}.yaml; known: {', '.join(catalog)}"
        )
    if not 1 <= count <= MAX_GPUS:
        raise ConfigError(
            f"device={setting!r}: the GPU count must be at least 1 and at most {MAX_GPUS}"
        )
    names = catalog[hardware].device_names
    if not names:
        raise ConfigError(
            f"device={setting!r}: conf/hardware/{hardware}.yaml lists no device_names to plan for"
        )
    return Device((names[0],) * count, (), setting)


def catalog_name(device: str, catalog: dict[str, HardwareSpec]) -> str | None:
    """Return the conf/hardware name whose `device_names` hold the name a device reports (from a
    device id, 'cuda:NVIDIA H200 x2', or a name), else None."""
    reported = device.split(":", 1)[1] if device.startswith(("cuda:", "cpu:")) else device
    want = re.sub(r"\s+x\d+$", "", reported).strip().casefold()
    found = [
        name for name, spec in catalog.items() if want in (n.casefold() for n in spec.device_names)
    ]
    if len(found) > 1:
        raise ValueError(f"device {want!r} is listed by several hardware files: {found}")
    return found[0] if found else None
