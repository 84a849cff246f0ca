"""The Python client against the real propbusd on a private bus."""

from __future__ import annotations

import asyncio

import pytest
from dbus_fast import Variant

import propbus
from world import World, aio, eventually


async def started(**kwargs: object) -> World:
    return await World().start(**kwargs)  # type: ignore[arg-type]


@aio
async def test_newcomers_first_lines_read_and_write_a_key() -> None:
    world = await started()
    try:
        await world.create("settings.volume", "i", 30)
        async with propbus.connect(world.address) as bus:
            vol = bus.property("settings.volume")
            assert await vol.get() == 30
            await vol.set(42)
            assert vol.current == 42, "set() returns after the signal was taken"
            assert await world.get("settings.volume") == 42
            assert vol.state is propbus.State.LIVE
            await vol.reset()
            assert await vol.get() == 30
    finally:
        await world.close()


@aio
async def test_values_start_with_the_value_and_follow_every_change_without_duplicates() -> None:
    world = await started()
    try:
        await world.create("ui.level", "i", 0)
        async with propbus.connect(world.address) as bus:
            level = bus.property("ui.level", int)
            seen = []

            async def collect() -> None:
                async for value in level.values():
                    seen.append(value)
                    if value == 3:
                        return
            task = asyncio.ensure_future(collect())
            await level.wait_live()
            for value in (1, 1, 2, 2, 3):
                await world.set("ui.level", Variant("i", value))
            await asyncio.wait_for(task, 10)
            assert seen == [0, 1, 2, 3]
    finally:
        await world.close()


@aio
async def test_a_write_of_another_type_is_type_mismatch_before_anything_is_sent() -> None:
    world = await started()
    try:
        await world.create("ui.name", "s", "a")
        async with propbus.connect(world.address) as bus:
            name = bus.property("ui.name", int)
            await eventually(lambda: name.state is propbus.State.TYPE_MISMATCH, what="a type mismatch")
            with pytest.raises(propbus.TypeMismatch):
                await name.get()
            with pytest.raises(propbus.TypeMismatch):
                await name.set(3)
            untyped = bus.property("ui.name")
            with pytest.raises(propbus.TypeMismatch):
                await untyped.set(3)
            assert await world.get("ui.name") == "a"
            history = await bus.history("ui.name")
            assert [entry.via for entry in history] == ["create"] or all(e.new == "a" for e in history)
    finally:
        await world.close()


@aio
async def test_errors_are_exception_classes_named_after_the_dbus_errors() -> None:
    world = await started()
    try:
        await world.create("ui.pct", "i", 5, minimum=Variant("v", Variant("i", 0)), maximum=Variant("v", Variant("i", 10)))
        await world.create("ui.fixed", "s", "x", writable=Variant("b", False))
        async with propbus.connect(world.address) as bus:
            with pytest.raises(propbus.OutOfRange) as caught:
                await bus.property("ui.pct").set(11)
            assert caught.value.name == "org.propbus.PropBus1.Error.OutOfRange"
            assert "ui.pct" in caught.value.message
            with pytest.raises(propbus.PropertyReadOnly):
                await bus.property("ui.fixed").set("y")
            with pytest.raises(propbus.UnknownKey):
                await bus.property("ui.nothing").reset()
            with pytest.raises(propbus.InvalidKey):
                await bus.property("nodot").get()
            prop = bus.property("ui.pct")
            value, revision = await prop.get_with_revision()
            await world.set("ui.pct", Variant("i", 6))
            with pytest.raises(propbus.Conflict):
                await prop.compare_and_set(revision, 7)
            assert issubclass(propbus.Conflict, propbus.PropBusError)
    finally:
        await world.close()


@aio
async def test_stale_while_the_daemon_is_gone_and_resynced_when_it_returns() -> None:
    world = await started()
    try:
        await world.manager("CreateProperty", "ssva{sv}", ["app.mode", "s", Variant("s", "a"), {}])
        async with propbus.connect(world.address) as bus:
            mode = bus.property("app.mode")
            values = []

            async def collect() -> None:
                async for value in mode.values():
                    values.append(value)
            task = asyncio.ensure_future(collect())
            await mode.wait_live()
            await world.stop_daemon(kill=True)
            await eventually(lambda: mode.state is propbus.State.STALE, what="stale")
            assert mode.current == "a", "the last known value stays"
            await world.start_daemon()
            await mode.wait_live(10)
            await world.set("app.mode", Variant("s", "b"))
            await eventually(lambda: values == ["a", "b"], what=f"a then b, got {values}")
            task.cancel()
    finally:
        await world.close()


@aio
async def test_a_key_created_later_turns_live_and_a_deleted_one_stale() -> None:
    world = await started()
    try:
        async with propbus.connect(world.address) as bus:
            later = bus.property("late.key")
            await asyncio.sleep(0.05)
            assert later.state is propbus.State.STALE
            await world.create("late.key", "b", True)
            assert await later.wait_live(10) is True
            await world.manager("DeleteProperty", "s", ["late.key"])
            await eventually(lambda: later.state is propbus.State.STALE, what="stale after delete")
    finally:
        await world.close()


class ViewModel(propbus.Observable):
    def __init__(self) -> None:
        self.switch = "Off"
        self.spinner = False


class Plain:
    def __init__(self) -> None:
        self.text = ""


@aio
async def test_two_way_binding_with_transforms_and_no_echo() -> None:
    world = await started()
    try:
        await world.create("settings.someBoolKey", "s", "0")
        async with propbus.connect(world.address) as bus:
            model = ViewModel()
            binding = bus.bind("settings.someBoolKey", model, "switch",
                               to_bus=lambda v: "1" if v == "On" else "0", from_bus=lambda v: "On" if v == "1" else "Off")
            async with binding:
                model.switch = "On"
                await binding.committed()
                assert await world.get("settings.someBoolKey") == "1"
                model.switch = "Off"
                model.switch = "On"
                await binding.committed()
                await world.set("settings.someBoolKey", Variant("s", "0"))
                await eventually(lambda: model.switch == "Off", what="the switch follows the bus")
                await world.set("settings.someBoolKey", Variant("s", "1"))
                await eventually(lambda: model.switch == "On", what="the switch follows the bus again")
                # No echo: the client wrote only the model's three writes.
                mine = [e for e in await bus.history("settings.someBoolKey") if e.bus_name == bus.unique_name]
                assert [e.new for e in mine] == ["1", "0", "1"]
                assert binding.state == propbus.BindingState(propbus.BindingStatus.LIVE)
    finally:
        await world.close()


@aio
async def test_a_plain_object_can_be_bound_and_a_refused_write_comes_back_with_its_reason() -> None:
    world = await started()
    try:
        await world.create("ui.text", "s", "start", choices=Variant("av", [Variant("s", "start"), Variant("s", "ok")]))
        async with propbus.connect(world.address) as bus:
            view = Plain()
            async with bus.bind("ui.text", view, "text") as binding:
                assert view.text == "start"
                view.text = "bad"
                await binding.committed()
                assert view.text == "start", "the daemon's value comes back"
                assert binding.state.status is propbus.BindingStatus.REFUSED
                assert "InvalidValue" in binding.state.reason
                assert not binding.state.writable
                view.text = "ok"
                await binding.committed()
                assert await world.get("ui.text") == "ok"
                await eventually(lambda: binding.state.status is propbus.BindingStatus.LIVE, what="live again")
    finally:
        await world.close()


@aio
async def test_commands_execute_start_cancel_and_every_observer_sees_results_and_errors() -> None:
    world = await started()
    try:
        await world.create("flags.go", "b", False)
        await world.create_command("vm.echo", 'printf "got %s" "$PROPBUS_INPUT"', enabled_when=Variant("s", "flags.go"))
        await world.create_command("vm.fail", "echo boom >&2; exit 3")
        await world.create_command("vm.slow", "sleep 30")
        async with propbus.connect(world.address) as bus:
            echo = bus.command("vm.echo")
            assert await echo.enabled.wait_live() is False
            with pytest.raises(propbus.NotEnabled) as caught:
                await echo.execute("cats")
            assert "vm.echo" in caught.value.message
            await world.set("flags.go", Variant("b", True))
            await eventually(lambda: echo.enabled.current is True, what="enabled")
            events = []

            executions = await echo.executions().ready()

            async def observe() -> None:
                async for event in executions:
                    events.append(event.kind)
                    if event.kind == "finished":
                        return
            observer = asyncio.ensure_future(observe())
            await asyncio.sleep(0.05)
            assert await echo.execute("cats") == "got cats"
            await asyncio.wait_for(observer, 10)
            assert events == ["started", "finished"]
            with pytest.raises(propbus.ExecutionFailed) as failed:
                await bus.command("vm.fail").execute()
            assert "boom" in failed.value.message
            slow = bus.command("vm.slow")
            executing = []

            async def spin() -> None:
                async for value in slow.executing.values():
                    executing.append(value)
            spinner = asyncio.ensure_future(spin())
            await eventually(lambda: executing == [False], what="not executing at first")
            execution = await slow.start()
            await eventually(lambda: executing[-1:] == [True], what="executing")
            await slow.cancel(execution)
            await eventually(lambda: executing == [False, True, False], what=f"executing [F,T,F], got {executing}")
            spinner.cancel()
    finally:
        await world.close()


@aio
async def test_cancelling_the_task_awaiting_execute_cancels_the_execution() -> None:
    world = await started()
    try:
        await world.create_command("vm.slow", "sleep 30")
        async with propbus.connect(world.address) as bus:
            slow = bus.command("vm.slow")
            failures = []

            async def errors() -> None:
                async for error in slow.errors():
                    failures.append(error)
                    return
            watcher = asyncio.ensure_future(errors())
            await asyncio.sleep(0.05)
            run = asyncio.ensure_future(slow.execute())
            await eventually(lambda: slow.executing.current is True, what="executing")
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            await asyncio.wait_for(watcher, 10)
            assert isinstance(failures[0], propbus.Cancelled)
            await eventually(lambda: slow.executing.current is False, what="not executing")
    finally:
        await world.close()


@aio
async def test_a_python_coroutine_can_be_a_commands_handler() -> None:
    world = await started()
    try:
        await world.manager("CreateCommand", "sa{sv}", ["text.upper", {"handler": Variant("b", True),
                                                                       "persistent": Variant("b", False)}])
        async with propbus.connect(world.address) as server, propbus.connect(world.address) as client:
            async def upper(text: str) -> str:
                if text == "boom":
                    raise propbus.InvalidValue("org.propbus.PropBus1.Error.InvalidValue", "no booms")
                return text.upper()
            async with await server.serve("text.upper", upper):
                upper_command = client.command("text.upper")
                await eventually(lambda: upper_command.enabled.current is True, what="enabled with a handler")
                assert await upper_command.execute("cats") == "CATS"
                with pytest.raises(propbus.InvalidValue):
                    await upper_command.execute("boom")
    finally:
        await world.close()


@aio
async def test_history_blame_and_revert() -> None:
    world = await started()
    try:
        await world.manager("CreateProperty", "ssva{sv}", ["doc.title", "s", Variant("s", "a"), {}])
        async with propbus.connect(world.address) as bus:
            title = bus.property("doc.title")
            await title.set("b")
            (_, revision) = await title.get_with_revision()
            await title.set("c")
            blame = await bus.blame("doc.title")
            assert blame is not None and blame.new == "c" and blame.bus_name == bus.unique_name
            assert await bus.revert(["doc.title"], to_revision=revision) == ["doc.title"]
            assert await title.get() == "b"
            entries = await bus.history("doc.title")
            assert [e.new for e in entries][-3:] == ["b", "c", "b"]
            assert entries[-1].via.lower().startswith("revert")
            change = entries[-1].change
            await bus.revert_change(change)
            assert await title.get() == "c"
            with pytest.raises(TypeError):
                await bus.history("doc.title", untill=3)  # type: ignore[call-arg]
    finally:
        await world.close()


@aio
async def test_an_override_holds_for_the_block_and_a_binding_says_who_holds_it() -> None:
    world = await started()
    try:
        await world.create("kiosk.motd", "s", "Open")
        async with propbus.connect(world.address) as bus, propbus.connect(world.address) as other:
            motd = bus.property("kiosk.motd")
            await motd.wait_live()
            view = Plain()
            async with bus.bind("kiosk.motd", view, "text") as binding:
                async with other.override("kiosk.motd", "Closed"):
                    await eventually(lambda: motd.current == "Closed", what="the override shows")
                    view.text = "Mine"
                    await binding.committed()
                    await eventually(lambda: binding.state.status is propbus.BindingStatus.OVERRIDDEN,
                                     what=f"overridden, got {binding.state}")
                    assert binding.state.by == other.unique_name
                    assert view.text == "Closed"
                await eventually(lambda: motd.current == "Mine", what="the user's value after the override")
                await eventually(lambda: binding.state.status is propbus.BindingStatus.LIVE, what="live again")
    finally:
        await world.close()


@aio
async def test_binding_state_follows_read_only_and_locks() -> None:
    world = await started()
    try:
        await world.create("ui.fixed", "s", "x", writable=Variant("b", False))
        await world.create("ui.free", "s", "x")
        async with propbus.connect(world.address) as bus:
            a, b = Plain(), Plain()
            fixed = bus.bind("ui.fixed", a, "text")
            free = bus.bind("ui.free", b, "text")
            await eventually(lambda: fixed.state.status is propbus.BindingStatus.READ_ONLY, what="read-only")
            await eventually(lambda: free.state.status is propbus.BindingStatus.LIVE, what="live")
            await world.lock("ui.free", {"value": "y", "for": ["root"]})
            await eventually(lambda: free.state.status is propbus.BindingStatus.LOCKED, what=f"locked, got {free.state}")
            assert "mandatory.d" in free.state.reason
            await eventually(lambda: b.text == "y", what="the locked value")
            await world.unlock()
            await eventually(lambda: free.state.status is propbus.BindingStatus.LIVE, what="unlocked")
    finally:
        await world.close()


@aio
async def test_map_and_combine_follow_their_sources() -> None:
    world = await started()
    try:
        await world.create("vm.a", "i", 1)
        await world.create("vm.b", "i", 2)
        async with propbus.connect(world.address) as bus:
            a, b = bus.property("vm.a"), bus.property("vm.b")
            total = propbus.combine(a, b, transform=lambda x, y: x + y)
            label = a.map(lambda x: f"a={x}")
            model = ViewModel()
            follower = propbus.follow(model, "spinner", total.map(lambda t: t > 10))
            seen = []

            async def collect() -> None:
                async for value in total.values():
                    seen.append(value)
                    if value == 30:
                        return
            task = asyncio.ensure_future(collect())
            await a.wait_live()
            await b.wait_live()
            assert label.current == "a=1"
            await world.set("vm.a", Variant("i", 10))
            await world.set("vm.b", Variant("i", 20))
            await asyncio.wait_for(task, 10)
            assert seen[0] == 3 and seen[-1] == 30
            await eventually(lambda: model.spinner is True, what="the spinner follows")
            follower.cancel()
    finally:
        await world.close()


@aio
async def test_pipelined_writes_leave_in_the_order_they_were_made() -> None:
    world = await started()
    try:
        await world.create("ui.count", "i", 0)
        async with propbus.connect(world.address) as bus:
            count = bus.property("ui.count")
            await count.wait_live()
            # Enough at once that the socket is busy and sends queue up in the client.
            await asyncio.gather(*(count.set(value) for value in range(1, 3001)))
            assert await world.get("ui.count") == 3000
            assert count.current == 3000
    finally:
        await world.close()


@aio
async def test_closing_the_client_cancels_the_executions_it_waits_for() -> None:
    world = await started()
    try:
        await world.create_command("vm.slow", "sleep 30")
        async with propbus.connect(world.address) as observer:
            slow = observer.command("vm.slow")
            failures = await slow.executions().ready()
            bus = await propbus.connect(world.address)
            run = asyncio.ensure_future(bus.command("vm.slow").execute())
            # Seen by the observer: the closing client may not have the Start's answer yet.
            await eventually(lambda: slow.executing.current is True, what="executing")
            await bus.close()
            with pytest.raises((propbus.Cancelled, propbus.Disconnected)):
                await run
            kinds = []
            async for event in failures:
                kinds.append(event.kind if event.error is None else type(event.error).__name__)
                if len(kinds) == 2:
                    break
            assert kinds == ["started", "Cancelled"]
    finally:
        await world.close()


@aio
async def test_writes_made_before_and_after_the_key_type_is_known_keep_their_order() -> None:
    world = await started()
    try:
        await world.create("ui.n", "i", 0)
        async with propbus.connect(world.address) as bus:
            n = bus.property("ui.n")
            # The first writes wait for the key's type (a read); the later ones know it.
            writes = []
            for value in range(1, 201):
                writes.append(asyncio.ensure_future(n.set(value)))
                if value % 10 == 0:
                    await asyncio.sleep(0.001)
            await asyncio.gather(*writes)
            assert await world.get("ui.n") == 200
            news = [entry.new for entry in await bus.history("ui.n")]
            assert news == sorted(news), news
    finally:
        await world.close()


@aio
async def test_the_changed_signal_names_every_change_and_says_which_are_the_clients_own() -> None:
    world = await started()
    try:
        if '<signal name="Changed">' not in await world.introspect("/org/propbus/PropBus1"):
            pytest.skip("this propbusd sends no Changed signal")
        await world.create("doc.title", "s", "a")
        async with propbus.connect(world.address) as bus:
            changes = bus.changes()
            first = asyncio.ensure_future(changes.__anext__())
            # The stream subscribes when first asked: the world writes until it sees one.
            written = 0
            while not first.done():
                written += 1
                await world.set("doc.title", Variant("s", f"world {written}"))
                await asyncio.sleep(0.01)
            theirs = first.result()
            assert theirs.keys == ("doc.title",) and theirs.cause == "Set" and not theirs.own
            await bus.property("doc.title").set("mine")
            while True:
                change = await asyncio.wait_for(changes.__anext__(), 10)
                if change.change > theirs.change and change.sender != world.control.unique_name:
                    break
            assert change.keys == ("doc.title",) and change.cause == "Set" and change.parent == 0
            assert change.own == (change.sender == bus.unique_name)
    finally:
        await world.close()
