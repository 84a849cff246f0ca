"""The Python harness of the client conformance suite (Tests/Conformance/*.json; the Swift
library runs the same files in Tests/IntegrationTests/ConformanceTests.swift)."""

from __future__ import annotations

import asyncio
import getpass
import json
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
from dbus_fast import Variant

import propbus
from world import REPO, World, aio

SCENARIOS = REPO / "Tests" / "Conformance"
WAIT = 20.0

TRANSFORMS: Dict[str, Any] = {
    # The seeds' switch: the model shows On/Off, the key holds "1"/"0".
    "onoff": (lambda model: "1" if model == "On" else "0", lambda key: "On" if key == "1" else "Off"),
}


class Model(propbus.Observable):
    def __init__(self, value: Any) -> None:
        self.value = value


class Recorder:
    """A property's value stream, recorded (optionally coalescing, with a slow consumer)."""

    def __init__(self, prop: "propbus.Property[Any]", coalesce: bool, slow_ms: int) -> None:
        self.prop = prop
        self.seen: List[Any] = []
        self.task = asyncio.ensure_future(self._run(coalesce, slow_ms / 1000))

    async def _run(self, coalesce: bool, pause: float) -> None:
        async for value in self.prop.values(coalesce=coalesce):
            self.seen.append(value)
            if pause:
                await asyncio.sleep(pause)


class Harness:
    def __init__(self, world: World, bus: propbus.Bus, name: str) -> None:
        self.world = world
        self.bus = bus
        self.name = name
        self.properties: Dict[str, Recorder] = {}
        self.bindings: Dict[str, Any] = {}
        self.models: Dict[str, Model] = {}
        self.model_writes: Dict[str, int] = {}
        self.bursts: Dict[str, "asyncio.Task[None]"] = {}
        self.executions: Dict[str, int] = {}
        self.observers: Dict[str, List[str]] = {}
        self.overrides: Dict[str, int] = {}
        self.other_tasks: List["asyncio.Task[Any]"] = []

    async def until(self, condition: Callable[[], bool], what: Callable[[], str]) -> None:
        deadline = time.monotonic() + WAIT
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: {what()}")
            await asyncio.sleep(0.005)

    async def run(self, steps: List[Dict[str, Any]]) -> None:
        for index, step in enumerate(steps):
            verb = next(iter(step))
            try:
                await getattr(self, "do_" + verb)(step[verb], step)
            except AssertionError as e:
                raise AssertionError(f"step {index + 1} {json.dumps(step)}: {e}") from None
        for task in self.other_tasks:
            task.cancel()
        for recorder in self.properties.values():
            recorder.task.cancel()

    # MARK: the world

    async def do_create(self, key: str, step: Dict[str, Any]) -> None:
        sig = step["type"]
        options: Dict[str, Variant] = {"persistent": Variant("b", bool(step.get("persistent", False)))}
        if "writable" in step:
            options["writable"] = Variant("b", step["writable"])
        if "choices" in step:
            options["choices"] = Variant("av", [Variant(sig, choice) for choice in step["choices"]])
        await self.world.manager("CreateProperty", "ssva{sv}", [key, sig, Variant(sig, step["default"]), options])

    async def do_create_command(self, key: str, step: Dict[str, Any]) -> None:
        options = {}
        if "enabled_when" in step:
            options["enabled_when"] = Variant("s", step["enabled_when"])
        await self.world.create_command(key, step["script"], **options)

    async def do_set(self, key: str, step: Dict[str, Any]) -> None:
        await self.world.set(key, Variant(step["type"], step["value"]))

    async def do_burst(self, key: str, step: Dict[str, Any]) -> None:
        values = list(range(step["from"], step["to"] + 1))
        window = 1 if step.get("one_at_a_time") else 64
        self.bursts[step["as"]] = asyncio.ensure_future(self.world.burst(key, step["type"], values, window))
        await asyncio.sleep(0)

    async def do_await(self, name: str, step: Dict[str, Any]) -> None:
        await asyncio.wait_for(self.bursts[name], 120)

    async def do_expect_daemon(self, key: str, step: Dict[str, Any]) -> None:
        assert await self.world.get(key) == step["value"]

    async def do_restart_daemon(self, _: Any, step: Dict[str, Any]) -> None:
        await self.world.stop_daemon(kill=step.get("kill", False))
        for name in step.get("stale", []):
            prop = self.properties[name].prop
            await self.until(lambda: prop.state is propbus.State.STALE, lambda: f"{name} is {prop.state}, not stale")
        await self.world.start_daemon()
        owned = self.world.owned_at
        props = [self.properties[name].prop for name in step.get("resync", [])]
        await self.until(lambda: all(p.state is propbus.State.LIVE for p in props), lambda: "not live after the restart")
        elapsed = (time.monotonic() - owned) * 1000
        goal = step.get("goal_ms", 100)
        print(f"conformance {self.name}: live {elapsed:.1f} ms after the daemon owned its name again (goal {goal} ms)")
        assert elapsed <= 10 * goal, f"live only {elapsed:.0f} ms after the daemon returned (goal {goal} ms)"

    async def do_lock(self, key: str, step: Dict[str, Any]) -> None:
        await self.world.lock(key, {"value": step["value"], "for": [getpass.getuser()]})

    async def do_unlock(self, key: str, step: Dict[str, Any]) -> None:
        await self.world.unlock()

    async def do_override(self, key: str, step: Dict[str, Any]) -> None:
        (handle,) = await self.world.manager("Override", "sva{sv}", [key, Variant(step["type"], step["value"]), {}])
        self.overrides[step["as"]] = handle

    async def do_release(self, name: str, step: Dict[str, Any]) -> None:
        await self.world.manager("ReleaseOverride", "t", [self.overrides.pop(name)])

    # MARK: properties

    async def do_open(self, key: str, step: Dict[str, Any]) -> None:
        self.properties[step["as"]] = Recorder(self.bus.property(key), step.get("coalesce", False), step.get("slow_ms", 0))
        await asyncio.sleep(0)

    async def do_expect(self, name: str, step: Dict[str, Any]) -> None:
        prop = self.properties[name].prop
        await self.until(lambda: prop.current == step["value"] and prop.state is propbus.State.LIVE,
                         lambda: f"{name} is {prop.current!r} ({prop.state.value}), not {step['value']!r}")

    async def do_expect_state(self, name: str, step: Dict[str, Any]) -> None:
        prop = self.properties[name].prop
        await self.until(lambda: prop.state.value == step["state"], lambda: f"{name} is {prop.state.value}")

    async def do_expect_recorded(self, name: str, step: Dict[str, Any]) -> None:
        seen = self.properties[name].seen
        if "last" in step:
            await self.until(lambda: seen[-1:] == [step["last"]], lambda: f"{name} recorded last {seen[-1:]}")
        if "equals" in step:
            await self.until(lambda: seen == step["equals"], lambda: f"{name} recorded {seen}")
        if "count" in step:
            await self.until(lambda: len(seen) == step["count"], lambda: f"{name} recorded {len(seen)} values")
        if step.get("increasing"):
            assert all(a < b for a, b in zip(seen, seen[1:])), f"{name} went back or repeated: {seen[:50]}"
        if "fewer_than" in step:
            assert len(seen) < step["fewer_than"], f"{name} recorded {len(seen)} values"

    # MARK: bindings

    async def do_bind(self, key: str, step: Dict[str, Any]) -> None:
        name = step["as"]
        model = Model(step["initial"])
        to_bus, from_bus = TRANSFORMS[step["map"]] if "map" in step else (None, None)
        self.models[name] = model
        self.model_writes[name] = 0
        self.bindings[name] = self.bus.bind(key, model, "value", to_bus=to_bus, from_bus=from_bus)

    async def do_model_set(self, name: str, step: Dict[str, Any]) -> None:
        self.models[name].value = step["value"]
        self.model_writes[name] += 1
        if step.get("commit"):
            await self.bindings[name].committed()

    async def do_model_set_and_execute(self, name: str, step: Dict[str, Any]) -> None:
        self.models[name].value = step["value"]
        self.model_writes[name] += 1
        assert await self.bus.command(step["command"]).execute(step["input"]) == step["result"]

    async def do_expect_model(self, name: str, step: Dict[str, Any]) -> None:
        model = self.models[name]
        await self.until(lambda: model.value == step["value"], lambda: f"the model of {name} shows {model.value!r}")

    async def do_expect_binding_state(self, name: str, step: Dict[str, Any]) -> None:
        binding = self.bindings[name]
        await self.until(lambda: binding.state.status.value == step["state"], lambda: f"{name} is {binding.state}")

    async def do_alternate(self, name: str, step: Dict[str, Any]) -> None:
        model, sig = self.models[name], step["type"]
        writes = []
        for i in range(step["count"]):
            if i % 2 == 0:
                model.value = i + 1
                self.model_writes[name] += 1
            else:
                writes.append(asyncio.ensure_future(self.world.set(step["key"], Variant(sig, i + 1))))
            await asyncio.sleep(0)
        await asyncio.gather(*writes)
        await self.bindings[name].committed()

    async def do_expect_agree(self, name: str, step: Dict[str, Any]) -> None:
        model, binding = self.models[name], self.bindings[name]
        prop = binding.property

        async def agreed() -> bool:
            daemon = await self.world.get(step["key"])
            return model.value == daemon and prop.current == daemon
        deadline = time.monotonic() + WAIT
        while not await agreed():
            if time.monotonic() > deadline:
                history = [(e.new, "client" if e.bus_name == self.bus.unique_name else "world") for e in await self.bus.history(step["key"])]
                raise AssertionError(f"model {model.value!r}, client {prop.current!r}, daemon {await self.world.get(step['key'])!r}; "
                                     f"the last changes: {history[-12:]}")
            await asyncio.sleep(0.01)

    async def do_expect_client_writes(self, name: str, step: Dict[str, Any]) -> None:
        binding = self.bindings[name]
        await binding.committed()
        mine = [e for e in await self.bus.history(binding.property.key) if e.bus_name == self.bus.unique_name]
        assert len(mine) <= self.model_writes[name], f"{len(mine)} writes by the client for {self.model_writes[name]} model writes"

    # MARK: commands

    async def do_execute(self, key: str, step: Dict[str, Any]) -> None:
        command = self.bus.command(key)
        if "error" in step:
            with pytest.raises(propbus.PropBusError) as caught:
                await command.execute(step["input"])
            assert caught.value.name.endswith("." + step["error"]), caught.value.name
            assert step.get("message_contains", "") in caught.value.message, caught.value.message
        else:
            assert await command.execute(step["input"]) == step["result"]

    async def do_execute_and_cancel_task(self, key: str, step: Dict[str, Any]) -> None:
        command = self.bus.command(key)
        await command.executing.wait_live()
        task = asyncio.ensure_future(command.execute(""))
        await self.until(lambda: command.executing.current is True, lambda: "never executing")
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - cancelled_at < 10
        await self.until(lambda: command.executing.current is False, lambda: "still executing after the cancel")

    async def do_start(self, key: str, step: Dict[str, Any]) -> None:
        self.executions[step["as"]] = (key, await self.bus.command(key).start(step["input"]))  # type: ignore[assignment]

    async def do_cancel(self, name: str, step: Dict[str, Any]) -> None:
        key, execution = self.executions[name]  # type: ignore[misc]
        await self.bus.command(key).cancel(execution)

    async def do_observe(self, key: str, step: Dict[str, Any]) -> None:
        kinds: List[str] = []
        self.observers[step["as"]] = kinds
        events = await self.bus.command(key).executions().ready()

        async def observe() -> None:
            async for event in events:
                kinds.append(event.kind if event.error is None else f"failed:{event.error.name.rsplit('.', 1)[-1]}")
        self.other_tasks.append(asyncio.ensure_future(observe()))

    async def do_expect_events(self, name: str, step: Dict[str, Any]) -> None:
        kinds = self.observers[name]
        await self.until(lambda: kinds == step["kinds"], lambda: f"{name} observed {kinds}")


def scenario_files() -> List[Path]:
    return sorted(SCENARIOS.glob("*.json"))


@pytest.mark.parametrize("path", scenario_files(), ids=lambda p: p.stem)
@aio
async def test_conformance(path: Path) -> None:
    scenario = json.loads(path.read_text())
    world = await World().start()
    try:
        async with propbus.connect(world.address) as bus:
            await Harness(world, bus, scenario["name"]).run(scenario["steps"])
    finally:
        await world.close()


def test_every_scenario_file_is_found() -> None:
    assert len(scenario_files()) >= 7
