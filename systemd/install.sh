#!/usr/bin/env bash
# Installs propbusd, propctl and the systemd/D-Bus files. Usage: systemd/install.sh [PREFIX]
# (default /usr). Run as root after `swift build -c release`.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr}
bin=$(swift build -c release --show-bin-path)
install -Dm755 "$bin/propbusd" "$prefix/bin/propbusd"
install -Dm755 "$bin/propctl" "$prefix/bin/propctl"
install -Dm644 systemd/propbusd.service "$prefix/lib/systemd/system/propbusd.service"
install -Dm644 systemd/propbusd-user.service "$prefix/lib/systemd/user/propbusd.service"
install -Dm644 systemd/org.propbus.PropBus1.system.service "$prefix/share/dbus-1/system-services/org.propbus.PropBus1.service"
install -Dm644 systemd/org.propbus.PropBus1.session.service "$prefix/share/dbus-1/services/org.propbus.PropBus1.service"
install -Dm644 systemd/org.propbus.PropBus1.conf "$prefix/share/dbus-1/system.d/org.propbus.PropBus1.conf"
install -Dm644 systemd/propbus.sysusers.conf "$prefix/lib/sysusers.d/propbus.conf"
install -Dm644 systemd/propbus.tmpfiles.conf "$prefix/lib/tmpfiles.d/propbus.conf"
if command -v systemd-sysusers >/dev/null; then systemd-sysusers propbus.conf || true; fi
if command -v systemd-tmpfiles >/dev/null; then systemd-tmpfiles --create propbus.conf || true; fi
echo "installed under $prefix; enable with: systemctl enable --now propbusd.service"
