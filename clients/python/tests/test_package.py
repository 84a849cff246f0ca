"""packaging/python3-propbus/build: the Debian package of the Python client (scripts/package
builds it beside propbus_*.deb)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from world import REPO

BUILD = REPO / "packaging" / "python3-propbus" / "build"


def run(*argv: str, **kwargs: object) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs).stdout  # type: ignore[call-overload]


@pytest.mark.skipif(shutil.which("dpkg-deb") is None or shutil.which("fakeroot") is None,
                    reason="dpkg-deb and fakeroot are not installed (scripts/setup installs them)")
def test_the_package_holds_the_module_its_metadata_and_depends_on_debians_dbus_fast() -> None:
    out = Path(tempfile.mkdtemp(prefix="pbpy-deb-"))
    try:
        deb = run(str(BUILD), "0.1.0", env={**os.environ, "OUTDIR": str(out)}).strip()
        assert deb == str(out / "python3-propbus_0.1.0_all.deb")
        fields = dict(line.split(": ", 1) for line in run("dpkg-deb", "--field", deb).splitlines() if ": " in line)
        assert fields["Package"] == "python3-propbus"
        assert fields["Architecture"] == "all"
        assert "python3-dbus-fast (>= 1.84)" in fields["Depends"]
        listing = run("dpkg-deb", "--contents", deb)
        for path in ("./usr/lib/python3/dist-packages/propbus/__init__.py", "./usr/lib/python3/dist-packages/propbus/py.typed",
                     "./usr/lib/python3/dist-packages/propbus-0.1.0.dist-info/METADATA",
                     "./usr/share/doc/python3-propbus/copyright", "./usr/share/doc/python3-propbus/changelog.gz"):
            assert path in listing, path
        assert "root/root" in listing and "__pycache__" not in listing
        tree = out / "tree"
        run("dpkg-deb", "-x", deb, str(tree))
        metadata = (tree / "usr/lib/python3/dist-packages/propbus-0.1.0.dist-info/METADATA").read_text()
        assert "License: Apache-2.0" in metadata
        assert "Apache-2.0" in (tree / "usr/share/doc/python3-propbus/copyright").read_text()
        # The packaged modules are the tree's, and import with the system's dbus-fast.
        code = "import propbus, sys; print(propbus.__file__); print(propbus.Conflict.dbus_name)"
        printed = run(sys.executable, "-c", code, env={**os.environ, "PYTHONPATH": str(tree / "usr/lib/python3/dist-packages")})
        assert str(tree) in printed and "org.propbus.PropBus1.Error.Conflict" in printed
        if shutil.which("lintian"):
            report = subprocess.run(["lintian", "--fail-on", "error", deb], capture_output=True, text=True)
            assert report.returncode == 0, report.stdout + report.stderr
    finally:
        shutil.rmtree(out, ignore_errors=True)
