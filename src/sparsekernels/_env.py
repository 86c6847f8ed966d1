"""Switches read from the environment (SPARSEKERNELS_*): on or off, spelled any usual way.

"0" was the only way to say off: SPARSEKERNELS_LAUNCH_PLANS=false read as on. A switch now takes
1/0, true/false, on/off or yes/no (any case; unset or empty: its default), and anything else
raises a ValueError naming the variable when the package loads, before any device work.
"""

from __future__ import annotations

import os

_ON = ("1", "true", "on", "yes")
_OFF = ("0", "false", "off", "no")


def flag(name: str, default: bool) -> bool:
    """The switch `name` from the environment, or `default` where it is unset or empty."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{name} must be 1/0, true/false, on/off or yes/no, got {raw!r}")
