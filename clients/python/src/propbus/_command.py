"""Commands: RACCommand across processes (enabled, executing, executions, results, errors)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Optional

from dbus_fast import Variant

from ._bus import COMMAND, object_path
from ._errors import PropBusError
from ._feed import Feed

if TYPE_CHECKING:
    from ._bus import Bus
    from ._property import Property


def guess_variant(value: Any) -> Variant:
    """``value`` as a Variant: a Variant as is; str ``s``, bool ``b``, int ``x``, float ``d``,
    bytes ``ay``, a list of str ``as``; ``None`` the empty string."""
    if isinstance(value, Variant):
        return value
    if value is None:
        return Variant("s", "")
    if isinstance(value, bool):
        return Variant("b", value)
    if isinstance(value, int):
        return Variant("x", value)
    if isinstance(value, float):
        return Variant("d", value)
    if isinstance(value, str):
        return Variant("s", value)
    if isinstance(value, (bytes, bytearray)):
        return Variant("ay", bytes(value))
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return Variant("as", list(value))
    raise TypeError(f"cannot tell the D-Bus type of {type(value).__name__} {value!r}: pass a dbus_fast.Variant")


@dataclass(frozen=True)
class ExecutionEvent:
    """One event of a command's executions, seen by every observer.

    ``kind`` is ``"started"``, ``"finished"`` (with ``result``) or ``"failed"`` (with
    ``error``, a :class:`PropBusError` such as :class:`ExecutionFailed`).
    """

    kind: str
    id: int
    result: Any = None
    error: Optional[PropBusError] = None


class Command:
    """A command of the daemon. Made by :meth:`Bus.command`.

    ``enabled`` and ``executing`` are its state keys as properties; ``execute()`` runs it and
    waits for the result (cancelling the awaiting task cancels the execution); ``start()`` and
    ``cancel()``; ``executions()``, ``results()`` and ``errors()`` show everyone's executions.
    """

    def __init__(self, bus: "Bus", key: str) -> None:
        self.bus = bus
        self.key = key
        self.path = object_path(key)
        self.enabled: "Property[bool]" = bus.property(key + ".Enabled", bool)
        self.executing: "Property[bool]" = bus.property(key + ".Executing", bool)

    def __repr__(self) -> str:
        return f"<propbus.Command {self.key}>"

    async def execute(self, input: Any = "") -> Any:
        """Runs the command with ``input`` and returns its result; failures raise their
        exception class (:class:`NotEnabled`, :class:`ExecutionFailed`, :class:`Cancelled`, …).

        Bound attribute writes made before reach the daemon first; cancelling the task that
        awaits it cancels the execution on the daemon.
        """
        await self.bus.commit_bound_writes()
        await self.bus._subscribe_command(self.path)
        start = asyncio.ensure_future(self._start(input))
        entry = (self.path, start)
        self.bus._starting.add(entry)
        try:
            execution = await asyncio.shield(start)
        except asyncio.CancelledError:
            # Cancelled before the id came back: cancel the execution once it does.
            start.add_done_callback(self._cancel_when_started)
            raise
        finally:
            self.bus._starting.discard(entry)
        outcome = self.bus._await_outcome(self.path, execution)
        try:
            event = await outcome
        except asyncio.CancelledError:
            self.bus._forget_outcome(self.path, execution)
            self.bus._spawn(self._cancel_quietly(execution))
            raise
        if event.error is not None:
            raise event.error
        return event.result

    def _cancel_when_started(self, start: "asyncio.Future[int]") -> None:
        if not start.cancelled() and start.exception() is None:
            self.bus._spawn(self._cancel_quietly(start.result()))

    async def _cancel_quietly(self, execution: int) -> None:
        try:
            await self.cancel(execution)
        except PropBusError:
            pass

    async def start(self, input: Any = "") -> int:
        """Starts an execution and returns its id at once (for :meth:`cancel`); bound attribute
        writes made before reach the daemon first."""
        await self.bus.commit_bound_writes()
        await self.bus._subscribe_command(self.path)
        return await self._start(input)

    async def _start(self, input: Any) -> int:
        (execution,) = await self.bus.call(self.path, COMMAND, "Start", "v", [guess_variant(input)])
        return int(execution)

    async def cancel(self, execution: int) -> None:
        """Cancels a running execution: it fails with :class:`Cancelled`."""
        await self.bus.call(self.path, COMMAND, "Cancel", "t", [execution])

    def executions(self) -> "EventStream":
        """Every execution's start, result and failure from now on, whoever ran it.

        The stream is registered at once; ``await stream.ready()`` waits until the bus has
        confirmed the subscription (events from then on are all seen).
        """
        feeds = self.bus._command_feeds.setdefault(self.path, set())
        return EventStream(feeds, self.bus._spawn(self.bus._subscribe_command(self.path)))

    async def results(self) -> AsyncIterator[Any]:
        """The result of every execution that finishes from now on, whoever ran it."""
        stream = self.executions()
        try:
            async for event in stream:
                if event.kind == "finished":
                    yield event.result
        finally:
            stream.close()

    async def errors(self) -> AsyncIterator[PropBusError]:
        """The error of every execution that fails from now on, whoever ran it."""
        stream = self.executions()
        try:
            async for event in stream:
                if event.kind == "failed" and event.error is not None:
                    yield event.error
        finally:
            stream.close()


class EventStream:
    """Events of a command as an ``async for`` stream; ``close()`` (or the bus closing) ends it."""

    def __init__(self, feeds: "set[Feed]", subscription: "asyncio.Task[None]") -> None:
        self._feed = Feed()
        self._feeds = feeds
        self._subscription = subscription
        feeds.add(self._feed)

    async def ready(self) -> "EventStream":
        """Waits until the bus confirmed the subscription."""
        await asyncio.shield(self._subscription)
        return self

    def close(self) -> None:
        self._feeds.discard(self._feed)
        self._feed.close()

    def __aiter__(self) -> "EventStream":
        return self

    async def __anext__(self) -> ExecutionEvent:
        try:
            return await self._feed.get()  # type: ignore[no-any-return]
        except StopAsyncIteration:
            self._feeds.discard(self._feed)
            raise


class Served:
    """This connection's registration as a command's handler (:meth:`Bus.serve`)."""

    def __init__(self, bus: "Bus", key: str) -> None:
        self.bus = bus
        self.key = key

    async def close(self) -> None:
        """Stops handling the command (running executions fail with ``HandlerVanished``)."""
        await self.bus._unserve(self.key)

    async def __aenter__(self) -> "Served":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
