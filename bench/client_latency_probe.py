#!/usr/bin/env python3
"""The Python client's observer of bench/client-latency.sh: the same changes as the plain
libdbus observer (bench/ref/watch-latency.c), seen through a property's ``values()``.

    client_latency_probe.py ADDRESS KEY COUNT

Prints "ready" once the property delivered its current value (subscribed and read), then takes
COUNT changes of the int32 KEY and prints "VALUE NANOSECONDS" for each (CLOCK_MONOTONIC when
``values()`` yielded it), after the last one; then "cached-read NS", what one read of
``current`` costs (the mean of a million).
"""

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python" / "src"))
import propbus  # noqa: E402


async def main(address: str, key: str, count: int) -> None:
    async with propbus.connect(address) as bus:
        prop = bus.property(key, int)
        seen = []
        first = True
        async for value in prop.values():
            if first:
                first = False
                print("ready", flush=True)
                continue
            seen.append((value, time.clock_gettime_ns(time.CLOCK_MONOTONIC)))
            if len(seen) == count:
                break
        for value, stamp in seen:
            print(value, stamp)
        reads = 1_000_000
        total = 0
        start = time.perf_counter_ns()
        for _ in range(reads):
            total += prop.current  # type: ignore[operator]
        elapsed = time.perf_counter_ns() - start
        print(f"cached-read {elapsed / reads:.1f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
