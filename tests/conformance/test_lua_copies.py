"""The clients send the very scripts the Python producer sends: their Lua copies are
``assemble(name)`` of aioqueue/store/lua byte for byte (``clients/sync_lua.py`` writes
them; this fails on drift), and the Go module's vendored Redis clients are Debian's."""

from __future__ import annotations

import filecmp
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from aioqueue.store.loader import SHARDED, Script, assemble
from tests.conformance.runners import GO_MODULE, ROOT

SYNC = ROOT / "clients" / "sync_lua.py"
COPIES = [GO_MODULE / "lua", ROOT / "clients" / "node" / "lua"]
DEBIAN_GO = Path("/usr/share/gocode/src/github.com")


def test_no_copy_drifted() -> None:
    check = subprocess.run(
        [sys.executable, str(SYNC), "--check"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, f"run python clients/sync_lua.py:\n{check.stdout}{check.stderr}"


@pytest.mark.parametrize("copies", COPIES, ids=lambda path: path.parent.name)
def test_copies_are_the_producer_scripts(copies: Path) -> None:
    for name in ("enqueue", "cancel"):
        source = (copies / f"{name}.lua").read_text("utf-8")
        assert source == Script(name).source == assemble(name)
        assert "-- @include" not in source, "a client must send the assembled source"
    sharded = (copies / "cancel.sharded.lua").read_text("utf-8")
    assert sharded == assemble("cancel", swaps=SHARDED) and "SPUBLISH" in sharded
    lines = (copies / "SHA1SUMS").read_text().splitlines()
    sums = {file: sha for sha, file in (line.split("  ") for line in lines)}
    for file, sha in sums.items():
        assert hashlib.sha1((copies / file).read_bytes()).hexdigest() == sha, file
    assert sums["enqueue.lua"] == Script("enqueue").sha, "the same EVALSHA name as Python's"


@pytest.mark.skipif(not DEBIAN_GO.is_dir(), reason="Debian's Go packages are not installed")
def test_vendored_go_sources_are_debians() -> None:
    vendor = GO_MODULE / "vendor" / "github.com"
    for package in ("gomodule/redigo/redis", "mna/redisc"):
        ours = sorted(path.name for path in (vendor / package).glob("*.go"))
        theirs = sorted(p.name for p in (DEBIAN_GO / package).glob("*.go") if "_test" not in p.name)
        assert ours == theirs, f"{package}: run clients/go/vendor.sh"
        _, mismatch, errors = filecmp.cmpfiles(vendor / package, DEBIAN_GO / package, ours, False)
        assert not mismatch and not errors, f"{package}: {mismatch or errors} differ; vendor.sh"
