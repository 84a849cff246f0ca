"""examples/flickr_search.py against a daemon with examples/flickr-search.json, as its
docstring shows."""

from __future__ import annotations

import asyncio
import os
import sys

from world import REPO, World, aio

EXAMPLE = REPO / "clients" / "python" / "examples" / "flickr_search.py"


async def run_example(world: World, *words: str) -> "tuple[int, str, str]":
    env = dict(world.env)
    env["PYTHONPATH"] = str(REPO / "clients" / "python" / "src") if os.environ.get("PROPBUS_PY_INSTALLED") != "1" else ""
    process = await asyncio.create_subprocess_exec(sys.executable, str(EXAMPLE), "--address", world.address, *words,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def started() -> World:
    world = World()
    # The search script waits 2 s like the article; the daemon passes its environment on.
    world.env["FLICKR_SEARCH_DELAY"] = "0.2"
    return await world.start(["--model", str(REPO / "examples" / "flickr-search.json")])


@aio
async def test_the_example_binds_the_text_runs_the_search_and_drives_the_spinner() -> None:
    world = await started()
    try:
        status, out, err = await run_example(world, "kittens")
        assert status == 0, err
        assert out.splitlines() == [
            "title: Flickr Search",
            "search text: kittens",
            "loading indicator hidden: false",
            "loading indicator hidden: true",
            'result: {"searchString": "kittens", "photos": ["kittens at dusk", "kittens, close up", "more kittens"]}',
        ], out + err
        assert await world.get("viewmodel.searchText") == "kittens"
    finally:
        await world.close()


@aio
async def test_a_short_text_leaves_the_search_disabled() -> None:
    world = await started()
    try:
        status, _, err = await run_example(world, "cat")
        assert status == 1
        assert "not enabled" in err
    finally:
        await world.close()
