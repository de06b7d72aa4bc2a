"""Which conf/hardware entry a device is, from the names devices report (`device_names:`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilesweep.settings import HardwareSpec


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
