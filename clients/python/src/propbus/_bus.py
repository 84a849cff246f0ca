"""The connection to propbusd: following the daemon's name, routing its signals, calling it."""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple

from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.errors import DBusError

from . import _errors
from ._errors import PropBusError, error_from
from ._feed import Feed, subscribe

if TYPE_CHECKING:
    from ._binding import Binding
    from ._command import Command, Served
    from ._history import HistoryEntry
    from ._override import Override
    from ._property import Property

BUS_NAME = "org.propbus.PropBus1"
ROOT_PATH = "/org/propbus/PropBus1"
MANAGER = "org.propbus.PropBus1.Manager"
VALUES = "org.propbus.PropBus1.Values"
COMMAND = "org.propbus.PropBus1.Command"
HANDLER = "org.propbus.PropBus1.Handler"
HANDLER_PATH = "/org/propbus/PropBus1/Handler"
PROPERTIES = "org.freedesktop.DBus.Properties"
OBJECT_MANAGER = "org.freedesktop.DBus.ObjectManager"

#: Outcomes of executions nobody waited for yet, kept per command (the newest).
_EARLY_OUTCOMES = 256


def locate(key: str) -> Optional[Tuple[str, str]]:
    """The group object of ``key`` and the key's property name on it, or ``None``.

    ``ui.switch.on`` is ``on`` of ``/org/propbus/PropBus1/ui/switch``.
    """
    dot = key.rfind(".")
    if dot <= 0 or dot == len(key) - 1:
        return None
    return object_path(key[:dot]), key[dot + 1:]


def object_path(dotted: str) -> str:
    """The object of a group or command: its dots become slashes below the root."""
    return ROOT_PATH + "/" + dotted.replace(".", "/")


def invalid_key(key: str) -> PropBusError:
    return _errors.InvalidKey("org.propbus.PropBus1.Error.InvalidKey",
                              f"'{key}' is not a key: a key is group.name, e.g. settings.volume")


class _FifoQueue(deque):  # type: ignore[type-arg]
    """The writer's queue of dbus-fast 1.84 (Debian 12), taken in the order it was filled.

    That release's writer takes queued messages with ``pop()``, the newest first, so messages
    queued while the socket is busy leave in reverse order (fixed upstream in later releases,
    which take them with ``popleft()``). Writes, and a write after a read, must leave in order.
    """

    def pop(self) -> Any:  # type: ignore[override]
        return self.popleft()


class _PatientSocket:
    """The writer's socket, for which a full send buffer means "wait", not "fail".

    dbus-fast's writer tries to send a new message at once when its queue is empty; if the
    socket's buffer is full then, ``send`` raises ``BlockingIOError`` and the writer closes the
    connection (1.84 and 5.x alike). Sending nothing instead makes it wait until the socket is
    writable, as it does after a partial send. (The client never sends fds.)
    """

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def send(self, data: Any) -> int:
        try:
            return int(self._sock.send(data))
        except BlockingIOError:
            return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def keep_sends_in_order(mb: MessageBus) -> None:
    """Makes ``mb``'s writer send queued messages first in, first out (see :class:`_FifoQueue`)
    and wait, not fail, when the socket is full (see :class:`_PatientSocket`)."""
    writer = getattr(mb, "_writer", None)
    queued = getattr(writer, "messages", None)
    if type(queued) is deque:
        writer.messages = _FifoQueue(queued)  # type: ignore[union-attr]
    sock = getattr(writer, "sock", None)
    if sock is not None and not isinstance(sock, _PatientSocket):
        writer.sock = _PatientSocket(sock)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Change:
    """One committed change, as the daemon's ``Changed`` signal announces it (no values).

    ``own`` is true when this connection made it (its write, or what its write caused).
    """

    change: int
    parent: int
    uid: int
    cause: str
    keys: Tuple[str, ...]
    sender: str = ""
    own: bool = False


class Bus:
    """A connection to propbusd on one bus. Made by :func:`propbus.connect`.

    The connection follows the daemon's bus name: when the daemon goes away every property
    turns stale, and when it comes back every property reads its value again and goes on.
    """

    def __init__(self, mb: MessageBus) -> None:
        keep_sends_in_order(mb)
        self._mb = mb
        self._owner: Optional[str] = None
        self._owner_known = False
        self._closed = False
        # path -> property name -> properties (weak: the bus does not keep them alive)
        self._properties: Dict[str, Dict[str, "weakref.WeakSet[Any]"]] = {}
        # match rules confirmed (or being confirmed) by the bus, by rule text
        self._matches: Dict[str, "asyncio.Future[None]"] = {}
        # command path -> feeds of its Started/Finished/Failed events
        self._command_feeds: Dict[str, Set[Feed]] = {}
        # command path -> execution id -> future of its outcome
        self._outcomes: Dict[str, Dict[int, "asyncio.Future[Any]"]] = {}
        self._early: Dict[str, "OrderedDict[int, Any]"] = {}
        # Starts of `execute` on their way: (command path, the task that returns the id)
        self._starting: Set[Tuple[str, "asyncio.Task[int]"]] = set()
        self._served: Dict[str, Callable[[Any], Awaitable[Any]]] = {}
        self._runs: Dict[Tuple[str, int], "asyncio.Task[Any]"] = {}
        self._change_feeds: Set[Feed] = set()
        self._lock_listeners: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._bindings: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._owner_listeners: List[Callable[[Optional[str]], None]] = []
        self._tasks: Set["asyncio.Task[Any]"] = set()
        mb.add_message_handler(self._on_message)

    # MARK: connecting

    @classmethod
    async def _open(cls, address: Optional[str], system: bool) -> "Bus":
        bus_type = BusType.SYSTEM if system else BusType.SESSION
        try:
            mb = await MessageBus(bus_address=address, bus_type=bus_type).connect()
        except (OSError, EOFError, DBusError) as e:
            raise _errors.Disconnected(_errors.Disconnected.dbus_name or "", f"cannot connect to the bus: {e}") from None
        bus = cls(mb)
        try:
            # Subscribe before asking, so an owner change between the two is not missed.
            await bus._add_match(f"type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
                                 f"member='NameOwnerChanged',arg0='{BUS_NAME}'")
            for member in ("InterfacesAdded", "InterfacesRemoved"):
                await bus._add_match(f"type='signal',sender='{BUS_NAME}',path='{ROOT_PATH}',"
                                     f"interface='{OBJECT_MANAGER}',member='{member}'")
            await bus._add_match(f"type='signal',sender='{BUS_NAME}',path='{ROOT_PATH}',member='LocksChanged'")
            try:
                owner = (await bus._call_bus("GetNameOwner", "s", [BUS_NAME]))[0]
            except PropBusError:
                owner = None
            if not bus._owner_known:
                bus._owner_changed(owner)
        except BaseException:
            mb.disconnect()
            raise
        return bus

    async def __aenter__(self) -> "Bus":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def unique_name(self) -> str:
        """This connection's unique name (``:1.42``), as the daemon and its history see it."""
        return self._mb.unique_name or ""

    @property
    def daemon(self) -> Optional[str]:
        """The daemon's unique name while it is on the bus, else ``None``."""
        return self._owner

    async def close(self) -> None:
        """Closes the connection: properties turn stale, their streams end, running
        executions this connection waits for are cancelled."""
        if self._closed:
            return
        # An execution this connection still waits for has nobody to take its result; one whose
        # Start is still on its way is cancelled once its id comes back.
        if self._starting:
            await asyncio.wait([start for _, start in self._starting], timeout=2)
        started = [(path, start.result()) for path, start in self._starting
                   if start.done() and not start.cancelled() and start.exception() is None]
        cancels = [self.call(path, COMMAND, "Cancel", "t", [execution])
                   for path, execution in started + [(path, execution) for path, waiting in self._outcomes.items()
                                                     for execution in waiting]]
        if cancels:
            await asyncio.wait([asyncio.ensure_future(cancel) for cancel in cancels], timeout=2)
        self._closed = True
        for task in list(self._runs.values()) + list(self._tasks):
            task.cancel()
        for prop in self._all_properties():
            prop._finish()
        for feeds in list(self._command_feeds.values()) + [self._change_feeds]:
            for feed in list(feeds):
                feed.close()
        for waiting in self._outcomes.values():
            for future in waiting.values():
                if not future.done():
                    future.set_exception(_errors.Disconnected(_errors.Disconnected.dbus_name or "", "the client closed"))
        self._mb.disconnect()
        try:
            await asyncio.wait_for(self._mb.wait_for_disconnect(), 2)  # type: ignore[no-untyped-call]
        except Exception:
            pass

    # MARK: what the library makes

    def property(self, key: str, type: Any = None, *, signature: Optional[str] = None) -> "Property[Any]":
        """A view of ``key``: its cached value, its changes, and writes.

        Returns at once and subscribes in the background. ``type`` (``int``, ``str``, …) or
        ``signature`` (``"i"``) make it typed: a key of another D-Bus type turns the property's
        state to ``TYPE_MISMATCH`` and its writes fail with :class:`TypeMismatch` before
        anything is sent.
        """
        from ._property import Property
        prop: Property[Any] = Property(self, key, type, signature)
        location = locate(key)
        if location is None or self._closed:
            prop._vanished()
            return prop
        path, name = location
        self._properties.setdefault(path, {}).setdefault(name, weakref.WeakSet()).add(prop)
        if self._owner is not None:
            prop._resync()
        else:
            prop._vanished()
        return prop

    def command(self, key: str) -> "Command":
        """A command of the daemon (``viewmodel.executeSearch``)."""
        from ._command import Command
        return Command(self, key)

    def bind(self, key: str, obj: Any, attribute: str, *, to_bus: Optional[Callable[[Any], Any]] = None,
             from_bus: Optional[Callable[[Any], Any]] = None, direction: str = "both") -> "Binding":
        """Binds ``obj.attribute`` to ``key`` (see :class:`propbus.Binding`).

        ``direction``: ``"both"`` (default), ``"from"`` (the key drives the attribute only, like
        GSettings' ``BIND_GET``) or ``"to"`` (the attribute drives the key only). ``from_bus``
        turns the key's value into the attribute's, ``to_bus`` the attribute's into the key's.
        """
        from ._binding import Binding
        return Binding(self, self.property(key), obj, attribute, to_bus=to_bus, from_bus=from_bus, direction=direction)

    def override(self, key: str, value: Any, *, ttl: Optional[float] = None) -> "Override":
        """An override of ``key`` held while the ``async with`` block runs (or until released).

        ``async with bus.override("kiosk.motd", "Closed"): ...`` — the key reads ``value`` above
        the user's value, which is never written; it ends with the block, when this connection
        leaves the bus, or after ``ttl`` seconds (then it also outlives the connection).
        """
        from ._override import Override
        return Override(self, key, value, ttl)

    async def serve(self, key: str, handler: Callable[[Any], Awaitable[Any]]) -> "Served":
        """Becomes the handler of the ``handler=true`` command ``key``: each execution calls
        ``await handler(input)``; its return value is the result (a :class:`Variant`, or a str,
        bool, int, float, bytes or list of str), a :class:`PropBusError` it raises fails the
        execution with that name, any other exception with ``ExecutionFailed``. A cancelled
        execution cancels the handler's task. Registers again after the daemon restarts.
        """
        from ._command import Served
        self._served[key] = handler
        await self.call(ROOT_PATH, MANAGER, "RegisterHandler", "s", [key])
        return Served(self, key)

    async def commit_bound_writes(self) -> None:
        """Waits until every binding's attribute writes made so far are answered by the daemon
        (``execute`` and ``start`` do this first: a text typed and a search run in the same
        turn run on that text)."""
        for binding in list(self._bindings):
            await binding.committed()

    async def _unserve(self, key: str) -> None:
        if self._served.pop(key, None) is not None and not self._closed:
            try:
                await self.call(ROOT_PATH, MANAGER, "UnregisterHandler", "s", [key])
            except PropBusError:
                pass

    # MARK: history

    async def history(self, prefix: str = "", *, after: int = 0, limit: int = 0, until: Optional[int] = None,
                      since_time: Optional[int] = None, until_time: Optional[int] = None,
                      uid: Optional[int] = None, user: Optional[str] = None) -> "List[HistoryEntry]":
        """Every recorded change of keys starting with ``prefix``, oldest first (all pages, or
        at most ``limit`` changes). Filters as ``propctl history``: ``until`` a revision,
        ``since_time``/``until_time`` nanoseconds since the epoch, ``uid``, ``user``."""
        entries: List[HistoryEntry] = []
        async for entry in self.history_entries(prefix, after=after, until=until, since_time=since_time,
                                                until_time=until_time, uid=uid, user=user):
            entries.append(entry)
            if limit and len(entries) >= limit:
                break
        return entries

    async def history_entries(self, prefix: str = "", *, after: int = 0, **filters: Any) -> "AsyncIterator[HistoryEntry]":
        """The same changes as :meth:`history`, a page at a time as they are read."""
        from ._history import HistoryEntry, history_filter
        selection = history_filter(filters)
        while True:
            changes, next_after = await self.call(ROOT_PATH, MANAGER, "ListHistory", "stua{sv}",
                                                  [prefix, after, 0, selection])
            for change in changes:
                yield HistoryEntry.from_wire(change)
            if not next_after:
                return
            after = next_after

    async def blame(self, key: str) -> "Optional[HistoryEntry]":
        """The latest recorded change of ``key`` (who, when, how), or ``None``."""
        from ._history import HistoryEntry
        changes, _ = await self.call(ROOT_PATH, MANAGER, "ListHistory", "stua{sv}",
                                     [key, 0, 1, {"latest": Variant("b", True)}])
        return HistoryEntry.from_wire(changes[0]) if changes else None

    async def revert(self, keys: Sequence[str], *, to_revision: int) -> List[str]:
        """Gives each key (or every key of a group) the value it had at ``to_revision``, in one
        atomic write recorded via ``Revert``; returns the keys changed."""
        (reverted,) = await self.call(ROOT_PATH, MANAGER, "Revert", "asttb", [list(keys), to_revision, 0, False])
        return list(reverted)

    async def revert_change(self, change: int, *, force: bool = False) -> List[str]:
        """Undoes one change: its keys get the values it replaced, only if they still hold what
        it wrote (else :class:`Conflict` naming who changed them since), unless ``force``."""
        (reverted,) = await self.call(ROOT_PATH, MANAGER, "Revert", "asttb", [[], 0, change, force])
        return list(reverted)

    # MARK: the Changed signal

    async def changes(self) -> AsyncIterator[Change]:
        """Every committed change from now on, as the daemon's ``Changed`` signal announces it:
        its id, the change that caused it (0: none), the uid, the ``cause`` and the keys; ``own`` tells
        this connection's own writes (and what they caused) from everyone else's."""
        await self._add_match(f"type='signal',sender='{BUS_NAME}',path='{ROOT_PATH}',member='Changed'")
        async for change in subscribe(self._change_feeds):
            yield change

    # MARK: calls

    async def call(self, path: str, interface: str, member: str, signature: str = "", body: Sequence[Any] = ()) -> List[Any]:
        """Calls a method of the daemon and returns the reply's arguments; an error reply
        raises its exception class (:class:`Conflict`, :class:`AccessDenied`, …)."""
        return await self.call_now(path, interface, member, signature, body)

    def call_now(self, path: str, interface: str, member: str, signature: str = "",
                 body: Sequence[Any] = ()) -> "asyncio.Future[List[Any]]":
        """Hands the call to the connection's writer now, so calls made one after the other
        leave in that order whatever their callers await, and returns the future of its reply's
        arguments (an error reply sets its exception class)."""
        return self._hand_over(Message(destination=BUS_NAME, path=path, interface=interface, member=member,
                                       signature=signature, body=list(body)))

    async def _call_bus(self, member: str, signature: str, body: List[Any]) -> List[Any]:
        return await self._hand_over(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                                             interface="org.freedesktop.DBus", member=member, signature=signature,
                                             body=body))

    def _hand_over(self, message: Message) -> "asyncio.Future[List[Any]]":
        future: "asyncio.Future[List[Any]]" = asyncio.get_running_loop().create_future()
        if self._closed or not self._mb.connected:
            future.set_exception(_errors.Disconnected(_errors.Disconnected.dbus_name or "",
                                                      "the client closed" if self._closed else "the connection to the bus is gone"))
            return future

        def answered(reply: Optional[Message], error: Optional[Exception]) -> None:
            if future.done():
                return
            if error is not None:
                if isinstance(error, DBusError):
                    future.set_exception(error_from(str(error.type), error.text))
                else:
                    future.set_exception(_errors.Disconnected(_errors.Disconnected.dbus_name or "",
                                                              f"the connection to the bus is gone: {error}"))
            elif reply is None:
                future.set_result([])
            elif reply.message_type == MessageType.ERROR:
                text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
                future.set_exception(error_from(str(reply.error_name), text))
            else:
                future.set_result(list(reply.body))
        try:
            # dbus-fast's own call() is this plus an await; its callback form sends at once.
            self._mb._call(message, answered)
        except (EOFError, OSError) as e:
            if not future.done():
                future.set_exception(_errors.Disconnected(_errors.Disconnected.dbus_name or "",
                                                          f"the connection to the bus is gone: {e}"))
        return future

    async def _add_match(self, rule: str) -> None:
        """Adds a match rule once; waits until the bus confirmed it, so a read made afterwards
        cannot miss a change."""
        future = self._matches.get(rule)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._matches[rule] = future
            try:
                await self._call_bus("AddMatch", "s", [rule])
                future.set_result(None)
            except BaseException as e:
                del self._matches[rule]
                future.set_exception(e)
                # Retrieved here, so the loop does not report it as never retrieved.
                future.exception()
                raise
            return
        await asyncio.shield(future)

    async def _subscribe_group(self, path: str) -> None:
        await self._add_match(f"type='signal',sender='{BUS_NAME}',path='{path}',"
                              f"interface='{PROPERTIES}',member='PropertiesChanged'")

    async def _subscribe_command(self, path: str) -> None:
        await self._add_match(f"type='signal',sender='{BUS_NAME}',path='{path}',interface='{COMMAND}'")

    def _spawn(self, coroutine: Awaitable[Any]) -> "asyncio.Task[Any]":
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # MARK: following the daemon

    def _all_properties(self) -> List[Any]:
        return [prop for group in self._properties.values() for props in group.values() for prop in list(props)]

    def _owner_changed(self, owner: Optional[str]) -> None:
        self._owner_known = True
        if owner == self._owner:
            return
        self._owner = owner
        for prop in self._all_properties():
            if owner is None:
                prop._vanished()
            else:
                prop._resync()
        for listener in list(self._owner_listeners):
            listener(owner)
        if owner is not None:
            for key in list(self._served):
                self._spawn(self._register_again(key))

    async def _register_again(self, key: str) -> None:
        try:
            await self.call(ROOT_PATH, MANAGER, "RegisterHandler", "s", [key])
        except PropBusError:
            pass

    def _on_message(self, msg: Message) -> Any:
        if msg.message_type == MessageType.METHOD_CALL:
            if msg.path == HANDLER_PATH and msg.interface == HANDLER:
                return self._handler_call(msg)
            return None
        if msg.message_type != MessageType.SIGNAL:
            return None
        if msg.sender == "org.freedesktop.DBus":
            if msg.member == "NameOwnerChanged" and msg.body and msg.body[0] == BUS_NAME:
                self._owner_changed(msg.body[2] or None)
            elif msg.member == "NameLost" or msg.member == "NameAcquired":
                pass
            return None
        # Only the daemon's own signals count: anyone may send a PropertiesChanged.
        if self._owner is None or msg.sender != self._owner:
            return None
        member = msg.member
        if member == "PropertiesChanged" and msg.interface == PROPERTIES:
            self._properties_changed(msg)
        elif member in ("Started", "Finished", "Failed") and msg.interface == COMMAND:
            self._command_signal(msg)
        elif member == "InterfacesAdded" and msg.path == ROOT_PATH:
            path, interfaces = msg.body
            values = interfaces.get(VALUES)
            for name, value in (values or {}).items():
                for prop in list(self._properties.get(path, {}).get(name, ())):
                    prop._bus_changed(value)
        elif member == "InterfacesRemoved" and msg.path == ROOT_PATH:
            for props in self._properties.get(msg.body[0], {}).values():
                for prop in list(props):
                    prop._resync()
        elif member == "LocksChanged" and msg.path == ROOT_PATH:
            keys = set(msg.body[0])
            for listener in list(self._lock_listeners):
                listener._locks_changed(keys)
        elif member == "Changed" and msg.path == ROOT_PATH:
            self._changed(msg)
        return None

    def _properties_changed(self, msg: Message) -> None:
        interface, changed, invalidated = msg.body
        if interface != VALUES:
            return
        group = self._properties.get(msg.path or "")
        if not group:
            return
        for name, value in changed.items():
            for prop in list(group.get(name, ())):
                prop._bus_changed(value)
        for name in invalidated:
            for prop in list(group.get(name, ())):
                prop._resync()

    def _changed(self, msg: Message) -> None:
        body = list(msg.body)
        if len(body) < 5:
            return
        sender = next((part for part in body[5:] if isinstance(part, str)), "")
        change = Change(change=body[0], parent=body[1], uid=body[2], cause=body[3], keys=tuple(body[4]),
                        sender=sender, own=bool(sender) and sender == self.unique_name)
        for feed in list(self._change_feeds):
            feed.put(change)

    # MARK: commands

    def _command_signal(self, msg: Message) -> None:
        from ._command import ExecutionEvent
        body = msg.body
        if msg.member == "Started":
            event = ExecutionEvent("started", body[0])
        elif msg.member == "Finished":
            event = ExecutionEvent("finished", body[0], result=body[1].value if isinstance(body[1], Variant) else body[1])
        else:
            event = ExecutionEvent("failed", body[0], error=error_from(body[1], body[2]))
        path = msg.path or ""
        for feed in list(self._command_feeds.get(path, ())):
            feed.put(event)
        if event.kind == "started":
            return
        waiting = self._outcomes.get(path, {})
        future = waiting.pop(event.id, None)
        if future is not None:
            if not future.done():
                future.set_result(event)
        else:
            early = self._early.setdefault(path, OrderedDict())
            early[event.id] = event
            while len(early) > _EARLY_OUTCOMES:
                early.popitem(last=False)

    def _await_outcome(self, path: str, execution: int) -> "asyncio.Future[Any]":
        future: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        early = self._early.get(path)
        if early is not None and execution in early:
            future.set_result(early.pop(execution))
        else:
            self._outcomes.setdefault(path, {})[execution] = future
        return future

    def _forget_outcome(self, path: str, execution: int) -> None:
        self._outcomes.get(path, {}).pop(execution, None)

    def _handler_call(self, msg: Message) -> Any:
        if msg.member == "Cancel" and msg.signature == "st":
            task = self._runs.pop((msg.body[0], msg.body[1]), None)
            if task is not None:
                task.cancel()
            return True
        if msg.member != "Run" or msg.signature != "stv":
            return Message.new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod",
                                     f"{msg.interface}.{msg.member} ({msg.signature}) is not handled here")
        key, execution, value = msg.body
        handler = self._served.get(key)
        if handler is None:
            return Message.new_error(msg, "org.propbus.PropBus1.Error.HandlerVanished", f"this client does not serve {key}")
        task = asyncio.ensure_future(self._run(msg, handler, value.value))
        self._runs[(key, execution)] = task
        task.add_done_callback(lambda _: self._runs.pop((key, execution), None))
        return True

    async def _run(self, msg: Message, handler: Callable[[Any], Awaitable[Any]], value: Any) -> None:
        from ._command import guess_variant
        try:
            result = guess_variant(await handler(value))
            reply = Message.new_method_return(msg, "v", [result])
        except asyncio.CancelledError:
            reply = Message.new_error(msg, "org.propbus.PropBus1.Error.Cancelled", "the execution was cancelled")
        except PropBusError as e:
            reply = Message.new_error(msg, e.name, e.message)
        except Exception as e:  # noqa: BLE001 - the handler's failure is the execution's
            reply = Message.new_error(msg, "org.propbus.PropBus1.Error.ExecutionFailed", f"{type(e).__name__}: {e}")
        if not self._closed:
            self._mb.send(reply)

