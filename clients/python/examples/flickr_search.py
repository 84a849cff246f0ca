#!/usr/bin/env python3
"""The Flickr search screen's view model (the ReactiveCocoa MVVM introduction's
RWTFlickrSearchViewModel) in asyncio, against a propbusd running examples/flickr-search.json:

    scripts/run -- --model examples/flickr-search.json &
    python3 clients/python/examples/flickr_search.py kittens

Every view-model attribute is a binding: the search text two-way, the title, the spinner and
the button's enabled state one way from the daemon. The "view" here prints what changes.
Exit status: 0 done, 1 the daemon refused, 69 no daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import List, Optional

import propbus


class FlickrSearchViewModel(propbus.Observable):
    """The screen's state lives in propbusd; this object is its view model in one process, and
    any other process (propctl, another view) sees and changes the same state."""

    def __init__(self, bus: propbus.Bus) -> None:
        self.title = ""
        self.search_text = ""
        self.loading_indicator_hidden = True
        self.is_search_enabled = False
        self._execute_search = bus.command("viewmodel.executeSearch")
        self._bindings = [
            # RAC(self.viewModel, searchText) = self.searchTextField.rac_textSignal
            bus.bind("viewmodel.searchText", self, "search_text"),
            bus.bind("viewmodel.title", self, "title", direction="from"),
            # RAC(self.loadingIndicator, hidden) = [self.executeSearch.executing not]
            bus.bind("viewmodel.executeSearch.Executing", self, "loading_indicator_hidden", direction="from",
                     from_bus=lambda executing: not executing),
            # validSearchSignal
            bus.bind("viewmodel.executeSearch.Enabled", self, "is_search_enabled", direction="from"),
        ]

    async def search(self) -> str:
        """[self.executeSearch execute:nil]: the text typed just before reaches the daemon first."""
        return str(await self._execute_search.execute(self.search_text))

    def stop(self) -> None:
        for binding in self._bindings:
            binding.close()


class View:
    """Prints the loading indicator whenever the view model changes it."""

    def __init__(self, view_model: FlickrSearchViewModel) -> None:
        self.view_model = view_model
        propbus.observe(view_model, "loading_indicator_hidden", self.loading_indicator_changed)

    def loading_indicator_changed(self, hidden: bool) -> None:
        print(f"loading indicator hidden: {str(hidden).lower()}", flush=True)


async def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a D-Bus address (default: the session bus)")
    parser.add_argument("--system", action="store_true", help="the system bus")
    parser.add_argument("words", nargs="*", help="the search text (default: kittens)")
    arguments = parser.parse_args(argv)
    try:
        bus = await propbus.connect(arguments.address, system=arguments.system)
    except propbus.PropBusError as e:
        print(f"flickr_search: cannot reach the bus: {e}", file=sys.stderr)
        return 69
    async with bus:
        view_model = FlickrSearchViewModel(bus)
        for _ in range(2000):
            if view_model.title:
                break
            await asyncio.sleep(0.005)
        else:
            print("flickr_search: propbusd with examples/flickr-search.json is not running (no viewmodel.title)",
                  file=sys.stderr)
            return 69
        print(f"title: {view_model.title}")
        View(view_model)
        # Typed and searched in the same turn: the search runs on this text.
        view_model.search_text = " ".join(arguments.words) or "kittens"
        print(f"search text: {view_model.search_text}")
        try:
            result = await view_model.search()
        except propbus.NotEnabled as e:
            print(f"flickr_search: the search is not enabled: the text must be longer than 3 characters ({e.message})",
                  file=sys.stderr)
            return 1
        except propbus.PropBusError as e:
            print(f"flickr_search: the search failed: {e}", file=sys.stderr)
            return 1
        # The result and Executing's change reach the client as two messages, in either
        # order; the spinner follows Executing, so the view shows it hidden before it goes.
        if not view_model.loading_indicator_hidden:
            hidden = asyncio.Event()
            stop_watching = propbus.observe(view_model, "loading_indicator_hidden",
                                            lambda now_hidden: now_hidden and hidden.set())
            try:
                await asyncio.wait_for(hidden.wait(), 30)
            finally:
                stop_watching()
        print(f"result: {result}")
        view_model.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
