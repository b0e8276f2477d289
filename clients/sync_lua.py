"""Copy the producer-side Lua scripts into each client, assembled, so that every client
sends the very source the Python producer sends (the same SHA1, the same script cache).

    python clients/sync_lua.py          write the copies (after a change to aioqueue/store/lua)
    python clients/sync_lua.py --check  exit 1, naming each copy that drifted

Each copy is ``aioqueue.store.loader.assemble(name)``: its ``-- @include`` lines resolved,
byte for byte what ``Script(name).source`` is. A script that publishes has a second build
for Redis Cluster (``<name>.sharded.lua``: SPUBLISH). ``SHA1SUMS`` beside the copies lists
each one's SHA1, the EVALSHA name a client calls it by. tests/conformance/test_lua_copies.py
runs the check.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from aioqueue.store.loader import SHARDED, assemble

SCRIPTS = ("enqueue", "cancel")
"""The scripts a producer calls (docs/protocol.md): it never writes a record itself."""

CLIENTS = Path(__file__).resolve().parent
TARGETS = (CLIENTS / "go" / "lua", CLIENTS / "node" / "lua")


def copies() -> dict[str, str]:
    """File name -> assembled source, for every script and build a client ships."""
    out: dict[str, str] = {}
    for name in SCRIPTS:
        source = assemble(name)
        out[f"{name}.lua"] = source
        sharded = assemble(name, swaps=SHARDED)
        if sharded != source:
            out[f"{name}.sharded.lua"] = sharded
    sums = "".join(
        f"{hashlib.sha1(text.encode()).hexdigest()}  {file}\n" for file, text in sorted(out.items())
    )
    out["SHA1SUMS"] = sums
    return out


def drifted() -> list[str]:
    """The copies (in every client) that differ from what ``copies`` makes, or are extra."""
    wanted, found = copies(), []
    for target in TARGETS:
        present = {path.name for path in target.glob("*")} if target.is_dir() else set()
        for file, text in wanted.items():
            path = target / file
            if not path.is_file() or path.read_bytes() != text.encode():
                found.append(str(path.relative_to(CLIENTS.parent)))
        found += [
            str((target / extra).relative_to(CLIENTS.parent)) for extra in present - set(wanted)
        ]
    return sorted(found)


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        stale = drifted()
        for path in stale:
            print(f"{path}: differs from aioqueue/store/lua (run python clients/sync_lua.py)")
        return 1 if stale else 0
    if argv:
        print("usage: python clients/sync_lua.py [--check]", file=sys.stderr)
        return 2
    for target in TARGETS:
        target.mkdir(parents=True, exist_ok=True)
        for stale in target.glob("*"):
            stale.unlink()
        for file, text in copies().items():
            (target / file).write_bytes(text.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
