"""Leased overrides as async context managers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from dbus_fast import Variant

from ._bus import MANAGER, ROOT_PATH
from ._errors import UnknownKey

if TYPE_CHECKING:
    from ._bus import Bus


class Override:
    """An override of a key: ``async with bus.override(key, value):`` holds it for the block.

    ``await override.hold()`` and ``await override.release()`` do the same by hand; ``handle``
    is the daemon's handle while it holds.
    """

    def __init__(self, bus: "Bus", key: str, value: Any, ttl: Optional[float]) -> None:
        self.bus = bus
        self.key = key
        self.value = value
        self.ttl = ttl
        self.handle: Optional[int] = None

    async def hold(self) -> int:
        """Places the override; returns its handle."""
        prop = self.bus.property(self.key)
        wire = await prop._encode(self.value)
        options: Dict[str, Variant] = {}
        if self.ttl is not None:
            options["ttl"] = Variant("d", float(self.ttl))
        (self.handle,) = await self.bus.call(ROOT_PATH, MANAGER, "Override", "sva{sv}", [self.key, wire, options])
        return int(self.handle)

    async def release(self) -> None:
        """Ends the override (nothing if it already ended)."""
        handle, self.handle = self.handle, None
        if handle is None:
            return
        try:
            await self.bus.call(ROOT_PATH, MANAGER, "ReleaseOverride", "t", [handle])
        except UnknownKey:
            pass  # it ended already (its TTL, or someone with writer rights released it)

    async def __aenter__(self) -> "Override":
        await self.hold()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()
