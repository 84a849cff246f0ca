"""Writability follows rights: a client that is not among a key's writers (uid nobody, on a
system-like bus with the daemon checking callers) sees its binding read-only, and a write it
makes anyway is refused, put back, and said why."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from dbus_fast import Variant

from world import REPO, World, aio

NOBODY = 65534

PROBE = r"""
import asyncio, sys, propbus

class Model:
    def __init__(self):
        self.text = ""

async def main(address):
    async with propbus.connect(address) as bus:
        model = Model()
        async with bus.bind("ui.admin", model, "text") as binding:
            while binding.state.status is propbus.BindingStatus.STALE:
                await asyncio.sleep(0.01)
            print("before", binding.state.status.value, model.text, flush=True)
            model.text = "mine"
            await binding.committed()
            print("after", binding.state.status.value, model.text, flush=True)
            print("reason", binding.state.reason, flush=True)

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the client as nobody")
@aio
async def test_a_binding_of_a_key_the_caller_may_not_write_is_read_only_and_its_write_is_refused() -> None:
    world = World(system=True)
    await world.start(["--system-access"])
    try:
        await world.create("ui.admin", "s", "x", writers=Variant("as", ["root"]))
        env = dict(world.env, PYTHONPATH=str(REPO / "clients" / "python" / "src"), HOME="/nonexistent")

        def as_nobody() -> None:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", PROBE, world.address, env=env,
                                                       stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                       preexec_fn=as_nobody, cwd="/")
        out, err = await asyncio.wait_for(process.communicate(), 60)
        lines = out.decode().splitlines()
        assert process.returncode == 0, err.decode()
        assert lines[0] == "before read_only x", lines
        assert lines[1] == "after refused x", lines
        assert "AccessDenied" in lines[2] and "ui.admin" in lines[2], lines
        assert await world.get("ui.admin") == "x"
    finally:
        await world.close()
