"""A private dbus-daemon and the real propbusd for one test, and a second connection ("the
world": another process's writes, busctl-like) to drive them. Never the machine's buses."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional

from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from propbus._bus import keep_sends_in_order

REPO = Path(__file__).resolve().parents[3]

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <limit name="max_replies_per_connection">50000</limit>
  <limit name="max_match_rules_per_connection">50000</limit>
  <limit name="reply_timeout">60000</limit>
</busconfig>
"""


# A system bus as Debian's system.conf sets it up, with the project's policy file: what a
# client that is not root meets (calls checked by the daemon with --system-access).
SYSTEM_BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
  </policy>
  <policy user="root"><allow own="org.propbus.PropBus1"/></policy>
  <include>{policy}</include>
  <limit name="max_replies_per_connection">50000</limit>
  <limit name="max_match_rules_per_connection">50000</limit>
</busconfig>
"""


def build_dir() -> Path:
    """Where propbusd is: $PROPBUS_BUILD_DIR, else the package's .build/debug."""
    override = os.environ.get("PROPBUS_BUILD_DIR")
    return Path(override) if override else REPO / ".build" / "debug"


def isolated_environment() -> Dict[str, str]:
    env = dict(os.environ)
    for name in ("DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "DBUS_STARTER_ADDRESS",
                 "DBUS_STARTER_BUS_TYPE", "NOTIFY_SOCKET", "XDG_RUNTIME_DIR"):
        env.pop(name, None)
    return env


def aio(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Runs an ``async def`` test in its own event loop (no pytest plugin needed)."""
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), float(os.environ.get("PROPBUS_PY_TEST_TIMEOUT", "120"))))
    return run


async def eventually(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> None:
    """Waits until ``condition()`` is true (a bound for a loaded machine, not a timing)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class World:
    """One test's bus, daemon and control connection."""

    def __init__(self, system: bool = False) -> None:
        self.system = system
        self.dir = Path(tempfile.mkdtemp(prefix="pbpy-"))
        self.state_dir = self.dir / "state"
        self.config_dir = self.dir / "config"
        self.vendor_dir = self.dir / "vendor"
        for d in (self.state_dir, self.config_dir / "mandatory.d", self.config_dir / "defaults.d", self.vendor_dir):
            d.mkdir(parents=True)
        self.env = isolated_environment()
        self.bus_process: Optional[subprocess.Popen[bytes]] = None
        self.daemon: Optional[subprocess.Popen[bytes]] = None
        self.address = ""
        self.control: Optional[MessageBus] = None
        self.daemon_arguments: List[str] = []

    # MARK: processes

    async def start(self, daemon_arguments: Optional[List[str]] = None) -> "World":
        socket = self.dir / "bus"
        config = self.dir / "bus.conf"
        if self.system:
            config.write_text(SYSTEM_BUS_CONFIG.format(socket=socket, policy=REPO / "systemd" / "org.propbus.PropBus1.conf"))
            # mkdtemp makes the directory 0700; other users must reach the socket inside.
            os.chmod(self.dir, 0o755)
        else:
            config.write_text(BUS_CONFIG.format(socket=socket))
        self.bus_process = subprocess.Popen(["dbus-daemon", "--nofork", "--print-address", f"--config-file={config}"],
                                            stdout=subprocess.PIPE, env=self.env, start_new_session=True)
        assert self.bus_process.stdout is not None
        line = await asyncio.get_running_loop().run_in_executor(None, self.bus_process.stdout.readline)
        self.address = line.decode().strip()
        assert self.address, "dbus-daemon printed no address"
        self.env["DBUS_SESSION_BUS_ADDRESS"] = self.address
        self.control = await MessageBus(bus_address=self.address).connect()
        keep_sends_in_order(self.control)
        # When the daemon's name gets an owner, as a client sees it (to measure resyncs from).
        self.owned_at = 0.0
        self.control.add_message_handler(self._owner_changed)
        await self.bus_call("AddMatch", "s", ["type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',"
                                              "arg0='org.propbus.PropBus1'"])
        self.daemon_arguments = daemon_arguments or []
        await self.start_daemon()
        return self

    def _owner_changed(self, message: Message) -> None:
        if message.member == "NameOwnerChanged" and message.body[0] == "org.propbus.PropBus1" and message.body[2]:
            self.owned_at = time.monotonic()

    async def start_daemon(self) -> None:
        binary = build_dir() / "propbusd"
        if not binary.exists():
            raise RuntimeError(f"{binary} does not exist: build the package first (swift build)")
        self.daemon_log = open(self.dir / "propbusd.log", "ab")
        self.daemon = subprocess.Popen([str(binary), "--address", self.address, "--state-dir", str(self.state_dir),
                                        "--config-dir", str(self.config_dir), "--vendor-dir", str(self.vendor_dir)]
                                       + self.daemon_arguments, env=self.env, stderr=self.daemon_log,
                                       start_new_session=True)
        await eventually(self.daemon_owns_name, 20, "propbusd to own its name")

    async def daemon_owns_name(self) -> bool:
        if self.daemon is not None and self.daemon.poll() is not None:
            raise RuntimeError(f"propbusd exited with {self.daemon.returncode}: {(self.dir / 'propbusd.log').read_text()}")
        (owned,) = await self.bus_call("NameHasOwner", "s", ["org.propbus.PropBus1"])
        return bool(owned)

    async def stop_daemon(self, kill: bool = False) -> None:
        if self.daemon is None:
            return
        self.daemon.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        await asyncio.get_running_loop().run_in_executor(None, self.daemon.wait)
        self.daemon = None
        await eventually(lambda: self._no_owner(), 10, "the daemon's name to be released")

    async def _no_owner(self) -> bool:
        (owned,) = await self.bus_call("NameHasOwner", "s", ["org.propbus.PropBus1"])
        return not owned

    async def close(self) -> None:
        if self.control is not None:
            self.control.disconnect()
        for process in (self.daemon, self.bus_process):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    await asyncio.get_running_loop().run_in_executor(None, functools.partial(process.wait, 10))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    # MARK: calls from "another process"

    async def bus_call(self, member: str, signature: str, body: List[Any]) -> List[Any]:
        return await self._call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                                        interface="org.freedesktop.DBus", member=member, signature=signature, body=body))

    async def manager(self, member: str, signature: str = "", body: Optional[List[Any]] = None) -> List[Any]:
        return await self._call(Message(destination="org.propbus.PropBus1", path="/org/propbus/PropBus1",
                                        interface="org.propbus.PropBus1.Manager", member=member,
                                        signature=signature, body=body or []))

    async def _call(self, message: Message) -> List[Any]:
        assert self.control is not None
        reply = await self.control.call(message)
        if reply.message_type == MessageType.ERROR:
            raise RuntimeError(f"{reply.error_name}: {reply.body[0] if reply.body else ''}")
        return list(reply.body)

    async def introspect(self, path: str) -> str:
        (xml,) = await self._call(Message(destination="org.propbus.PropBus1", path=path,
                                          interface="org.freedesktop.DBus.Introspectable", member="Introspect"))
        return str(xml)

    async def create(self, key: str, signature: str, default: Any, **options: Variant) -> None:
        await self.manager("CreateProperty", "ssva{sv}",
                           [key, signature, Variant(signature, default), {"persistent": Variant("b", False), **options}])

    async def create_command(self, key: str, script: str, **options: Variant) -> None:
        opts = {"exec": Variant("as", ["/bin/sh", "-c", script]), "persistent": Variant("b", False)}
        opts.update(options)
        await self.manager("CreateCommand", "sa{sv}", [key, opts])

    def _set_message(self, key: str, value: Variant) -> Message:
        group, name = key.rsplit(".", 1)
        return Message(destination="org.propbus.PropBus1", path="/org/propbus/PropBus1/" + group.replace(".", "/"),
                       interface="org.freedesktop.DBus.Properties", member="Set", signature="ssv",
                       body=["org.propbus.PropBus1.Values", name, value])

    async def set(self, key: str, value: Variant) -> None:
        await self._call(self._set_message(key, value))

    async def get(self, key: str) -> Any:
        group, name = key.rsplit(".", 1)
        (value,) = await self._call(Message(destination="org.propbus.PropBus1",
                                            path="/org/propbus/PropBus1/" + group.replace(".", "/"),
                                            interface="org.freedesktop.DBus.Properties", member="Get", signature="ss",
                                            body=["org.propbus.PropBus1.Values", name]))
        return value.value

    async def burst(self, key: str, signature: str, values: List[Any], window: int = 64) -> None:
        """Pipelined Sets, as racing writers make them: up to 64 on their way at once (dbus-fast
        1.84 fails a send that finds the socket's buffer full instead of waiting)."""
        assert self.control is not None
        gate = asyncio.Semaphore(window)

        async def one(value: Any) -> None:
            async with gate:
                reply = await self.control.call(self._set_message(key, Variant(signature, value)))  # type: ignore[union-attr]
            if reply.message_type == MessageType.ERROR:
                raise RuntimeError(f"{reply.error_name}: {reply.body}")
        await asyncio.gather(*(one(value) for value in values))

    async def lock(self, key: str, value: Any) -> None:
        """A mandatory layer file locking ``key`` for everyone but root, then a reload."""
        (self.config_dir / "mandatory.d" / "50-test.json").write_text(json.dumps({key: value}))
        await self.manager("Reload")

    async def unlock(self) -> None:
        (self.config_dir / "mandatory.d" / "50-test.json").unlink(missing_ok=True)
        await self.manager("Reload")
