"""History entries: who changed what, when, and how."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from dbus_fast import Variant

_MISSING = object()

# Each filter's D-Bus type, as ListHistory takes it.
_FILTER_TYPES = {"until": "t", "since_time": "x", "until_time": "x", "uid": "u", "user": "s"}


def history_filter(filters: Dict[str, Any]) -> Dict[str, Variant]:
    """ListHistory's ``a{sv}`` filter from keyword arguments; an unknown one is a TypeError."""
    selection: Dict[str, Variant] = {}
    for name, value in filters.items():
        if value is None:
            continue
        if name not in _FILTER_TYPES:
            raise TypeError(f"unknown history filter '{name}' (known: {', '.join(sorted(_FILTER_TYPES))})")
        selection[name] = Variant(_FILTER_TYPES[name], value)
    return selection


@dataclass(frozen=True)
class HistoryEntry:
    """One recorded change of one key.

    ``old`` and ``new`` are the values (``None`` when the key did not exist; ``"<redacted>"``
    with ``redacted`` true for a secret key the caller may not read); ``via`` says how
    (``Set``, ``Apply``, ``binding``, ``Revert``, …); the rest names the caller.
    """

    change: int
    revision: int
    time: int
    key: str
    kind: str
    via: str
    old: Any = None
    new: Any = None
    had_old: bool = False
    had_new: bool = False
    transient: bool = False
    redacted: bool = False
    bus_name: str = ""
    uid: Optional[int] = None
    user: str = ""
    pid: Optional[int] = None
    comm: str = ""
    exe: str = ""
    unit: str = ""
    host: str = ""
    fields: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, row: Dict[str, Variant]) -> "HistoryEntry":
        raw = {name: value.value for name, value in row.items()}

        def inner(name: str) -> Any:
            value = raw.get(name)
            return value.value if isinstance(value, Variant) else value

        return cls(change=raw.get("change", 0), revision=raw.get("revision", 0), time=raw.get("time", 0),
                   key=raw.get("key", ""), kind=raw.get("kind", ""), via=raw.get("via", ""),
                   old=inner("old"), new=inner("new"), had_old="old" in raw, had_new="new" in raw,
                   transient=raw.get("transient", False), redacted=raw.get("redacted", False),
                   bus_name=raw.get("bus_name", ""), uid=raw.get("uid"), user=raw.get("user", ""),
                   pid=raw.get("pid"), comm=raw.get("comm", ""), exe=raw.get("exe", ""), unit=raw.get("unit", ""),
                   host=raw.get("host", ""), fields=raw)
