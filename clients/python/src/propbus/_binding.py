"""Bindings between a key and a Python object's attribute (the seeds' RACChannel)."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, List, Optional, Set

from dbus_fast import Variant

from . import _errors
from ._bus import MANAGER, ROOT_PATH
from ._errors import PropBusError
from ._feed import Feed, subscribe
from ._property import State
from ._values import same

if TYPE_CHECKING:
    from ._bus import Bus
    from ._property import Property


class Observable:
    """A mixin whose attribute writes a :class:`Binding` sees.

    ``class ViewModel(propbus.Observable): ...``. A binding also works with a plain object (its
    class is swapped for an observing subclass once); a class with ``__slots__`` and no
    ``__dict__`` must use this mixin.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        _notify(self, name, value)


def _notify(obj: Any, name: str, value: Any) -> None:
    observers = obj.__dict__.get("_propbus_observers") if hasattr(obj, "__dict__") else None
    if observers:
        for observer in list(observers.get(name, ())):
            observer(value)


def _observing_setattr(self: Any, name: str, value: Any) -> None:
    super(type(self), self).__setattr__(name, value)
    _notify(self, name, value)


_observing_classes: Dict[type, type] = {}


def _observe(obj: Any, name: str, observer: Callable[[Any], None]) -> Callable[[], None]:
    if not isinstance(obj, Observable):
        cls = type(obj)
        if cls not in _observing_classes.values():
            sub = _observing_classes.get(cls)
            if sub is None:
                sub = type(cls.__name__, (cls,), {"__setattr__": _observing_setattr, "__module__": cls.__module__})
                _observing_classes[cls] = sub
            try:
                obj.__class__ = sub
            except TypeError:
                raise TypeError(f"cannot observe {cls.__name__}.{name}: derive {cls.__name__} from "
                                "propbus.Observable") from None
    observers = obj.__dict__.setdefault("_propbus_observers", {})
    observers.setdefault(name, []).append(observer)

    def remove() -> None:
        listeners = observers.get(name, [])
        if observer in listeners:
            listeners.remove(observer)
    return remove


def observe(obj: Any, attribute: str, callback: Callable[[Any], None]) -> Callable[[], None]:
    """Calls ``callback(value)`` after every write of ``obj.attribute`` (an
    :class:`Observable`, or a plain object whose class is swapped for an observing subclass);
    returns a function that stops it. What a view uses to follow its view model."""
    return _observe(obj, attribute, callback)


class BindingStatus(str, enum.Enum):
    """What a binding's writes can do now (see :class:`BindingState`)."""

    LIVE = "live"
    STALE = "stale"
    REFUSED = "refused"
    OVERRIDDEN = "overridden"
    READ_ONLY = "read_only"
    LOCKED = "locked"


@dataclass(frozen=True)
class BindingState:
    """A binding's state: ``status`` plus why (``reason``, the daemon's message) and, while
    another holder's override hides the key's value, who holds it (``by``, a bus name).

    ``writable`` is what a control's ``enabled`` follows (``g_settings_bind_writable``).
    """

    status: BindingStatus
    reason: str = ""
    by: str = ""

    @property
    def writable(self) -> bool:
        return self.status in (BindingStatus.LIVE, BindingStatus.STALE)


LIVE = BindingState(BindingStatus.LIVE)
STALE = BindingState(BindingStatus.STALE)


class Binding:
    """``obj.attribute`` bound to a key. Made by :meth:`Bus.bind`; ``close()`` (or leaving its
    ``async with``) ends it.

    - at the start the key's value wins (``direction="to"``: the attribute's);
    - an attribute write sends exactly one ``Set``, a write of the value it already shows none;
    - a change on the bus sets the attribute once and sends nothing back (no echo);
    - while the attribute's own writes are on their way, bus changes wait: once the daemon
      answered the last of them, the attribute gets the daemon's value if it differs. A refused
      write thus puts the daemon's value back, and ``state`` says why.
    """

    def __init__(self, bus: "Bus", prop: "Property[Any]", obj: Any, attribute: str, *,
                 to_bus: Optional[Callable[[Any], Any]], from_bus: Optional[Callable[[Any], Any]],
                 direction: str) -> None:
        if direction not in ("both", "from", "to"):
            raise ValueError(f"direction must be 'both', 'from' or 'to', not {direction!r}")
        self.bus = bus
        self.property = prop
        self.obj = obj
        self.attribute = attribute
        self.direction = direction
        self._to_bus = to_bus or (lambda value: value)
        self._from_bus = from_bus or (lambda value: value)
        self._bus_value: Optional[Variant] = None
        self._model_value: Optional[Variant] = None
        self._synced: Any = getattr(obj, attribute, None)
        self._pending = 0
        self._giving = False
        self._closed = False
        self._state = STALE
        self._state_feeds: Set[Feed] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._meta_task: Optional["asyncio.Task[Any]"] = None
        self._remove_model_observer: Optional[Callable[[], None]] = None
        if direction != "from":
            self._remove_model_observer = _observe(obj, attribute, self._model_changed)
        self._token = prop._observe(self._bus_changed)
        bus._lock_listeners.add(self)
        bus._bindings.add(self)
        self._owner_listener = self._owner_changed
        bus._owner_listeners.append(self._owner_listener)
        self._refresh_metadata()
        if direction == "to":
            self._send(self._synced)

    async def __aenter__(self) -> "Binding":
        await self.property.wait_live()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Ends the binding: neither side follows the other any more."""
        if self._closed:
            return
        self._closed = True
        self.property._unobserve(self._token)
        if self._remove_model_observer is not None:
            self._remove_model_observer()
        if self._owner_listener in self.bus._owner_listeners:
            self.bus._owner_listeners.remove(self._owner_listener)
        for feed in list(self._state_feeds):
            feed.close()

    # MARK: state

    @property
    def state(self) -> BindingState:
        """live, stale, refused(reason), overridden(by), read_only or locked(reason)."""
        return self._state

    def states(self) -> AsyncIterator[BindingState]:
        """The current state first, then every change of it (to drive a control's enabled)."""
        return subscribe(self._state_feeds, self._state, distinct=lambda a, b: a == b)

    async def committed(self) -> None:
        """Waits until every write of the attribute made so far is answered by the daemon
        (committed, or refused and rolled back into the attribute). A command executed after
        it sees the written value."""
        await asyncio.sleep(0)
        await self._idle.wait()

    def _set_state(self, state: BindingState) -> None:
        if state == self._state:
            return
        self._state = state
        for feed in list(self._state_feeds):
            feed.put(state)

    def _refresh_metadata(self) -> None:
        if self._closed:
            return
        if self._meta_task is not None and not self._meta_task.done():
            self._meta_task.cancel()
        self._meta_task = self.bus._spawn(self._read_metadata())

    async def _read_metadata(self) -> None:
        try:
            rows = await self.bus.call(ROOT_PATH, MANAGER, "ListProperties", "s", [self.property.key])
        except PropBusError:
            self._set_state(STALE)
            return
        meta = next((row[3] for row in rows[0] if row[0] == self.property.key), None)
        if meta is None:
            self._set_state(STALE)
            return
        self._set_state(state_from_metadata({name: value.value for name, value in meta.items()}))

    def _locks_changed(self, keys: Set[str]) -> None:
        if self.property.key in keys:
            self._refresh_metadata()

    def _owner_changed(self, owner: Optional[str]) -> None:
        if owner is None:
            self._set_state(STALE)
        else:
            self._refresh_metadata()

    # MARK: values

    def _bus_changed(self, wire: Variant) -> None:
        self._bus_value = wire
        if self._state.status in (BindingStatus.OVERRIDDEN, BindingStatus.STALE):
            self._refresh_metadata()
        self._settle()

    def _settle(self) -> None:
        if self._closed or self._pending or self.direction == "to" or self._bus_value is None:
            return
        if self._model_value is not None and same(self._model_value, self._bus_value):
            return
        self._model_value = self._bus_value
        new = self._from_bus(self._bus_value.value)
        self._synced = new
        if not same(getattr(self.obj, self.attribute, None), new):
            self._giving = True
            try:
                setattr(self.obj, self.attribute, new)
            finally:
                self._giving = False

    def _model_changed(self, value: Any) -> None:
        if self._giving or self._closed or same(value, self._synced):
            return
        self._synced = value
        self._send(value)

    def _send(self, value: Any) -> None:
        self._pending += 1
        self._idle.clear()
        self.bus._spawn(self._write(self._to_bus(value)))

    async def _write(self, value: Any) -> None:
        # The property's writes leave in the order they are made, and each task makes its write
        # before anything else it awaits: the attribute's order is the daemon's.
        try:
            wire = await self.property._write_value(value)
            self._model_value = wire
            if self._state.status is not BindingStatus.LIVE:
                self._refresh_metadata()
            elif self.property._variant is not None and not same(self.property._variant, wire):
                # Accepted but not shown: a layer above the user's value (an override) hides it.
                self._refresh_metadata()
        except PropBusError as error:
            # Whatever the daemon holds goes back to the attribute.
            self._model_value = None
            self._set_state(state_from_error(error))
        finally:
            self._pending -= 1
            if self._pending == 0:
                self._settle()
                self._idle.set()


def state_from_metadata(meta: Dict[str, Any]) -> BindingState:
    """What a key's ``ListProperties`` metadata says about writing it (for this caller)."""
    if meta.get("locked") and not meta.get("writable", True):
        return BindingState(BindingStatus.LOCKED, reason=f"locked by {meta.get('layer_source', 'a mandatory file')}")
    if not meta.get("writable", True):
        return BindingState(BindingStatus.READ_ONLY, reason="the key is read-only")
    if meta.get("layer") == "override":
        return BindingState(BindingStatus.OVERRIDDEN, reason="an override hides the user's value",
                            by=str(meta.get("layer_source", "")))
    return LIVE


def state_from_error(error: PropBusError) -> BindingState:
    """What a refused write says about the binding."""
    if isinstance(error, _errors.Locked):
        return BindingState(BindingStatus.LOCKED, reason=error.message)
    if isinstance(error, (_errors.ReadOnly, _errors.PropertyReadOnly)):
        return BindingState(BindingStatus.READ_ONLY, reason=error.message)
    if isinstance(error, (_errors.ServiceUnknown, _errors.Disconnected, _errors.NoReply)):
        return STALE
    return BindingState(BindingStatus.REFUSED, reason=f"{error.name}: {error.message}")


def follow(obj: Any, attribute: str, source: Any, transform: Optional[Callable[[Any], Any]] = None) -> "asyncio.Task[None]":
    """One-way: sets ``obj.attribute`` to every value of ``source`` (a property, a
    :class:`Derived` or any object with ``values()``), through ``transform``; returns the task
    (cancel it to stop)."""
    async def run() -> None:
        async for value in source.values():
            setattr(obj, attribute, transform(value) if transform else value)
    return asyncio.ensure_future(run())


__all__: List[str] = ["Binding", "BindingState", "BindingStatus", "Observable", "follow", "observe"]
