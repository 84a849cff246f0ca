"""A bounded queue of values for one consumer, ended by close()."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, AsyncIterator, Callable, Deque, Optional, Set

#: Changes a slow consumer has not taken yet; beyond it the oldest are dropped (the newest
#: always arrives).
BUFFER_LIMIT = 65536

_END = object()


class Feed:
    """Values put from the event loop's callbacks, taken by one ``async for``.

    With ``coalesce`` only the newest value waits (last value wins; the final value is never
    dropped); ``distinct`` (a same-value test) skips a value equal to the last one taken.
    """

    def __init__(self, coalesce: bool = False, distinct: Optional[Callable[[Any, Any], bool]] = None) -> None:
        self._items: Deque[Any] = deque(maxlen=1 if coalesce else BUFFER_LIMIT)
        self._waiter: Optional["asyncio.Future[None]"] = None
        self._closed = False
        self._distinct = distinct
        self._last: Any = _END

    def put(self, value: Any) -> None:
        if self._closed:
            return
        self._items.append(value)
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def get(self) -> Any:
        """The next value, or raises StopAsyncIteration once closed and drained."""
        while True:
            while self._items:
                value = self._items.popleft()
                if self._distinct is not None and self._last is not _END and self._distinct(self._last, value):
                    continue
                self._last = value
                return value
            if self._closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        return await self.get()


async def subscribe(feeds: Set[Feed], first: Any = _END, *, coalesce: bool = False,
                    distinct: Optional[Callable[[Any, Any], bool]] = None) -> AsyncIterator[Any]:
    """A feed added to ``feeds`` (where its producer puts values) at the first ``async for``
    step, starting with ``first`` if given, and removed when the consumer stops."""
    feed = Feed(coalesce=coalesce, distinct=distinct)
    if first is not _END:
        feed.put(first)
    feeds.add(feed)
    try:
        async for value in feed:
            yield value
    finally:
        feeds.discard(feed)


NOTHING = _END
