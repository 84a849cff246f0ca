"""Values derived from properties: map and combine."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Generic, List, Optional, Sequence, TypeVar

from ._values import same

T = TypeVar("T")


class Derived(Generic[T]):
    """``transform`` of the latest values of some properties (or other derived values).

    ``current`` is computed from the sources' cached values (``None`` until each has one);
    ``values()`` yields it first, then after every change of a source, never twice the same.
    ``propbus.combine(a, b, f)`` and ``prop.map(f)`` make them; ``propbus.follow`` binds one
    into an attribute.
    """

    def __init__(self, sources: Sequence[Any], transform: Callable[[List[Any]], T]) -> None:
        self.sources = list(sources)
        self._transform = transform

    @property
    def current(self) -> Optional[T]:
        values = [source.current for source in self.sources]
        if any(value is None for value in values):
            return None
        return self._transform(values)

    def map(self, transform: Callable[[T], Any]) -> "Derived[Any]":
        return Derived([self], lambda values: transform(values[0]))

    async def values(self) -> AsyncIterator[T]:
        latest: List[Any] = [None] * len(self.sources)
        known = [False] * len(self.sources)
        changed = asyncio.Queue()  # type: asyncio.Queue[None]

        async def pump(index: int, source: Any) -> None:
            async for value in source.values():
                latest[index] = value
                known[index] = True
                changed.put_nowait(None)

        tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(self.sources)]
        last: Any = _NOTHING
        try:
            while True:
                await changed.get()
                # Take every change that is already there: one value per batch.
                while not changed.empty():
                    changed.get_nowait()
                if not all(known):
                    continue
                value = self._transform(list(latest))
                if last is _NOTHING or not same(last, value):
                    last = value
                    yield value
        finally:
            for task in tasks:
                task.cancel()


_NOTHING = object()


def combine(*sources: Any, transform: Optional[Callable[..., T]] = None) -> Derived[Any]:
    """The latest values of ``sources`` together: ``combine(a, b)`` is their tuple,
    ``combine(a, b, transform=f)`` is ``f(a, b)``."""
    if transform is None:
        return Derived(sources, tuple)
    return Derived(sources, lambda values: transform(*values))
