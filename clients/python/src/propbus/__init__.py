"""propbus: an asyncio client for propbusd, the property bus.

    import asyncio, propbus

    async def main():
        async with propbus.connect() as bus:
            volume = bus.property("settings.volume")
            print(await volume.get())
            async for level in volume.values():
                print("volume", level)

    asyncio.run(main())
"""

from __future__ import annotations

from typing import Any, Generator, Optional

from ._binding import Binding, BindingState, BindingStatus, Observable, follow, observe
from ._bus import Bus, Change
from ._command import Command, EventStream, ExecutionEvent, Served
from ._derived import Derived, combine
from ._errors import *  # noqa: F401,F403 - the exception classes, named after the D-Bus errors
from ._errors import ALL_ERRORS, PropBusError, error_class
from ._history import HistoryEntry
from ._override import Override
from ._property import Property, State

__version__ = "0.1.0"


class connect:
    """Connects to propbusd's bus: ``async with propbus.connect() as bus:`` (closed after the
    block) or ``bus = await propbus.connect()`` (close it with ``await bus.close()``).

    The session bus by default; ``system=True`` the system bus; ``address`` any D-Bus address
    (``unix:path=/run/user/1000/bus``). The daemon need not be running: properties are stale
    until it is.
    """

    def __init__(self, address: Optional[str] = None, *, system: bool = False) -> None:
        self._address = address
        self._system = system
        self._bus: Optional[Bus] = None

    def __await__(self) -> Generator[Any, None, Bus]:
        return Bus._open(self._address, self._system).__await__()

    async def __aenter__(self) -> Bus:
        self._bus = await Bus._open(self._address, self._system)
        return self._bus

    async def __aexit__(self, *exc: Any) -> None:
        if self._bus is not None:
            await self._bus.close()


__all__ = [
    "connect", "Bus", "Property", "State", "Command", "EventStream", "ExecutionEvent", "Served", "Binding",
    "BindingState", "BindingStatus", "Observable", "follow", "observe", "Derived", "combine", "Override",
    "HistoryEntry", "Change", "PropBusError", "error_class",
] + ALL_ERRORS
