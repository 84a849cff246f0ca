"""One key of the daemon: its cached value, its changes as an async stream, and writes."""

from __future__ import annotations

import asyncio
import enum
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Generic, List, Optional, Set, Tuple, TypeVar

from dbus_fast import Variant

from . import _errors
from ._bus import PROPERTIES, VALUES, invalid_key, locate
from ._errors import PropBusError
from ._feed import NOTHING, Feed, subscribe
from ._values import python_type_matches, same, variant

if TYPE_CHECKING:
    from ._bus import Bus
    from ._derived import Derived

T = TypeVar("T")
U = TypeVar("U")


_NO_VALUE = object()


class State(str, enum.Enum):
    """Whether a property's cached value can be trusted."""

    #: The cached value is the daemon's, kept fresh by its signals.
    LIVE = "live"
    #: The daemon is not on the bus (not started, restarting, gone) or the key cannot be read:
    #: the cached value is the last one known. It resynchronizes by itself.
    STALE = "stale"
    #: The key holds a value of another D-Bus type than the property was asked for.
    TYPE_MISMATCH = "type_mismatch"


class Property(Generic[T]):
    """One key, typed by its D-Bus type. Made by :meth:`Bus.property`.

    ``current`` is the cached value (``None`` before the first read), kept fresh by the daemon's
    ``PropertiesChanged``; ``values()`` is the value first, then every change; ``get()`` reads
    the daemon now; ``set()``, ``compare_and_set()`` and ``reset()`` write.
    """

    def __init__(self, bus: "Bus", key: str, py_type: Any, signature: Optional[str]) -> None:
        self.bus = bus
        self.key = key
        self._location = locate(key)
        self._py_type = py_type
        self._expected = signature
        self._variant: Optional[Variant] = None
        self._value: Any = None
        self._signature: Optional[str] = None
        self._state = State.STALE
        self._mismatch: Optional[str] = None
        self._reading = False
        self._read_sent: Optional[asyncio.Event] = None
        self._during_read: Optional[Variant] = None
        self._generation = 0
        self._feeds: Set[Feed] = set()
        self._state_feeds: Set[Feed] = set()
        self._observers: Dict[int, Callable[[Variant], None]] = {}
        self._next_observer = 0
        self._state_waiters: Set["asyncio.Future[None]"] = set()
        self._writes_handed: Optional["asyncio.Future[None]"] = None

    def __repr__(self) -> str:
        return f"<propbus.Property {self.key} {self._state.value} {self._value!r}>"

    # MARK: reading

    @property
    def current(self) -> Optional[T]:
        """The cached value: the daemon's latest while ``state`` is LIVE, the last known while
        STALE, ``None`` before the first read and on a type mismatch. Costs no call."""
        return self._value  # type: ignore[no-any-return]

    @property
    def state(self) -> State:
        """LIVE, STALE or TYPE_MISMATCH."""
        return self._state

    @property
    def signature(self) -> Optional[str]:
        """The key's D-Bus type (``"i"``), once read."""
        return self._signature

    async def get(self) -> T:
        """Reads the value from the daemon now (not the cache)."""
        return (await self.get_with_revision())[0]

    async def get_with_revision(self) -> Tuple[T, int]:
        """The value and its revision, for :meth:`compare_and_set`."""
        path, name = self._located()
        value, revision = await self.bus.call(path, VALUES, "GetWithRevision", "s", [name])
        self._check_type(value.signature)
        return value.value, revision

    def values(self, *, coalesce: bool = False) -> AsyncIterator[T]:
        """The value first (once known), then every change in the order the daemon made them,
        never the same value twice in a row (compared as wire bytes). Goes on across daemon
        restarts; ends when the bus closes.

        Subscribing and taking the cached value happen together, so no change falls in
        between. With ``coalesce`` a slow consumer gets only the newest value when it asks
        (the last value wins and is never dropped); without it, up to 65,536 changes wait.
        """
        return self._values(coalesce)

    async def _values(self, coalesce: bool) -> AsyncIterator[T]:
        first = self._value if self._variant is not None else NOTHING
        async for value in subscribe(self._feeds, first, coalesce=coalesce, distinct=same):
            yield value

    def states(self) -> AsyncIterator[State]:
        """The current state first, then every change of it."""
        return subscribe(self._state_feeds, self._state, distinct=lambda a, b: a == b)

    async def wait_live(self, timeout: Optional[float] = None) -> T:
        """Waits until the property is LIVE (the first read answered); returns ``current``."""
        await self.wait_until(lambda: self._state is State.LIVE, timeout)
        return self._value  # type: ignore[no-any-return]

    async def wait_until(self, condition: Callable[[], bool], timeout: Optional[float] = None) -> None:
        """Waits until ``condition()`` holds, checked at every change of value or state."""
        async def wait() -> None:
            while not condition():
                future = asyncio.get_running_loop().create_future()
                self._state_waiters.add(future)
                try:
                    await future
                finally:
                    self._state_waiters.discard(future)
        await asyncio.wait_for(wait(), timeout)

    def map(self, transform: Callable[[T], U]) -> "Derived[U]":
        """A value derived from this property: ``transform`` of each value (see :class:`Derived`)."""
        from ._derived import Derived
        return Derived([self], lambda values: transform(values[0]))

    # MARK: writing

    async def set(self, value: T) -> None:
        """Writes ``value`` (``Properties.Set``). When it returns, ``current`` already shows it
        (the daemon sends its signal before its reply). A value that does not fit the key's
        type raises :class:`TypeMismatch` before anything is sent. Writes leave in the order
        they were made, however many are on their way."""
        await self._write_value(value)

    async def _write_value(self, value: Any) -> Variant:
        """``set``, returning the value as it was sent."""
        wire, _ = await self._write("Set", value)
        assert wire is not None
        return wire

    async def compare_and_set(self, revision: int, value: T) -> int:
        """Writes ``value`` only if the key's revision is still ``revision``; returns the new
        revision. A moved revision raises :class:`Conflict`."""
        _, reply = await self._write("CompareAndSet", value, revision)
        return int(reply[0])

    async def reset(self) -> None:
        """Forgets the stored value, so the key reads its default again."""
        await self._write("Reset", _NO_VALUE)

    async def _write(self, member: str, value: Any, revision: int = 0) -> Tuple[Optional[Variant], List[Any]]:
        path, name = self._located()
        # Each write waits for the one made before it to be handed to the connection: one may
        # wait for the key's type or the first read, and must not be overtaken.
        previous, handed = self._writes_handed, asyncio.get_running_loop().create_future()
        self._writes_handed = handed
        try:
            wire = None if value is _NO_VALUE else await self._encode(value)
            await self._wait_read_sent()
            if previous is not None:
                await previous
            if member == "Set":
                reply = self.bus.call_now(path, PROPERTIES, "Set", "ssv", [VALUES, name, wire])
            elif member == "CompareAndSet":
                reply = self.bus.call_now(path, VALUES, "CompareAndSet", "stv", [name, revision, wire])
            else:
                reply = self.bus.call_now(path, VALUES, "Reset", "s", [name])
        finally:
            if not handed.done():
                handed.set_result(None)
        return wire, await reply

    async def key_signature(self) -> str:
        """The key's D-Bus type, read from the daemon if not known yet."""
        if self._signature is None:
            path, name = self._located()
            (wire,) = await self.bus.call(path, PROPERTIES, "Get", "ss", [VALUES, name])
            self._signature = wire.signature
        assert self._signature is not None
        return self._signature

    async def _encode(self, value: Any) -> Variant:
        if isinstance(value, Variant) and self._expected is None and self._signature is None:
            return value
        signature = await self.key_signature()
        self._check_type(signature)
        if isinstance(value, Variant):
            if value.signature != signature:
                raise self._mismatch_error(f"got a value of type '{value.signature}'")
            return value
        try:
            return variant(signature, value)
        except Exception as e:  # dbus-fast says what did not fit
            raise self._mismatch_error(f"got {type(value).__name__} {value!r} ({e})") from None

    def _check_type(self, signature: str) -> None:
        if not self._admits(signature):
            raise self._mismatch_error(f"the key has type '{signature}'", expected_from_key=True)

    def _admits(self, signature: str) -> bool:
        if self._expected is not None and signature != self._expected:
            return False
        return self._py_type is None or python_type_matches(self._py_type, signature)

    def _mismatch_error(self, what: str, expected_from_key: bool = False) -> PropBusError:
        wanted = self._expected or (self._py_type.__name__ if self._py_type is not None else self._signature)
        if expected_from_key:
            text = f"property {self.key}: asked for a value of type '{wanted}', {what}"
        else:
            text = f"property {self.key} has type '{self._signature}', {what}"
        return _errors.TypeMismatch(_errors.TypeMismatch.dbus_name or "", text)

    def _located(self) -> Tuple[str, str]:
        if self._location is None:
            raise invalid_key(self.key)
        return self._location

    async def _wait_read_sent(self) -> None:
        # A write sent before the read would have its signal taken as older than the read's
        # answer; sent after it, its signal follows the answer and `current` shows it.
        if self._read_sent is not None:
            await self._read_sent.wait()

    # MARK: following the daemon (called by the bus, on the event loop)

    def _observe(self, observer: Callable[[Variant], None]) -> int:
        """Tells ``observer`` the current wire value (if known) and every accepted change."""
        self._next_observer += 1
        self._observers[self._next_observer] = observer
        if self._variant is not None:
            observer(self._variant)
        return self._next_observer

    def _unobserve(self, token: int) -> None:
        self._observers.pop(token, None)

    def _bus_changed(self, wire: Variant) -> None:
        if self._reading:
            self._during_read = wire
            return
        self._accept(wire)

    def _resync(self) -> None:
        if self._location is None:
            return
        self._generation += 1
        self._reading = True
        self._during_read = None
        self._read_sent = asyncio.Event()
        self.bus._spawn(self._read(self._generation, self._read_sent))

    async def _read(self, generation: int, sent: asyncio.Event) -> None:
        path, name = self._location  # type: ignore[misc]
        try:
            # The rule first, then the read: a change between the two is in a signal the
            # client receives before the read's answer.
            await self.bus._subscribe_group(path)
        except PropBusError:
            pass
        if generation != self._generation:
            sent.set()
            return
        call = self.bus.call_now(path, PROPERTIES, "Get", "ss", [VALUES, name])
        sent.set()
        try:
            (wire,) = await call
            error = None
        except PropBusError as e:
            wire, error = None, e
        if generation != self._generation:
            return
        self._reading = False
        self._read_sent = None
        # The daemon answers a round's calls after its signals: a signal that came while the
        # read was out is from the read's own round (newer) or an earlier one (same value).
        during, self._during_read = self._during_read, None
        if during is not None:
            self._accept(during)
        elif error is None and isinstance(wire, Variant):
            self._accept(wire)
        else:
            # The key does not exist (yet), or the daemon went away meanwhile.
            self._set_state(State.STALE)

    def _accept(self, wire: Variant) -> None:
        self._signature = wire.signature
        if not self._admits(wire.signature):
            self._variant = None
            self._value = None
            self._set_state(State.TYPE_MISMATCH)
            return
        if self._variant is None or not same(self._variant, wire):
            self._variant = wire
            self._value = wire.value
            for feed in list(self._feeds):
                feed.put(self._value)
            for observer in list(self._observers.values()):
                observer(wire)
        self._set_state(State.LIVE)
        self._wake()

    def _vanished(self) -> None:
        self._generation += 1
        self._reading = False
        if self._read_sent is not None:
            self._read_sent.set()
            self._read_sent = None
        self._set_state(State.STALE)

    def _finish(self) -> None:
        self._vanished()
        for feed in list(self._feeds) + list(self._state_feeds):
            feed.close()

    def _set_state(self, state: State) -> None:
        if state is self._state:
            return
        self._state = state
        for feed in list(self._state_feeds):
            feed.put(state)
        self._wake()

    def _wake(self) -> None:
        for future in list(self._state_waiters):
            if not future.done():
                future.set_result(None)
