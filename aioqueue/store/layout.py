"""The KEYS and ARGV of a Lua script, read from its header: the one place they are stated.

A header names each key and argument on a line of its own, in order from 1::

    KEYS[1]      active   ZSET  job id -> lease deadline (ms)          one key
    KEYS[8..17]  ready    LIST  ready lists of priorities 0..9         a group of keys
    KEYS[14..]   ready    LIST  the ready lists this call uses         as many as the call has
    ARGV[5..]    jobs           seven per job:                         a list of records,
                   .id          ...                                    their fields in order

A key is named after what gives it on the key object (``core/keys``: ``QueueKeys``,
``ChannelKeys``, ``TopicKeys``): a property for one key, for a group the method that
lists them (``links()``; ``ready`` is ``ready_lists()``, as ``ready(p)`` is one list).
Wrappers build KEYS and ARGV by name (``Layout.keys``, ``Layout.args``); the packed hot
path, which caches what is the same for every call of a queue, checks its order against
the layout once, at import (``Layout.expect``). tests/store/test_lua_headers.py checks
the Lua side: a script's first lines bind each key to a local of its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

Arg = str | bytes | int | float

GROUPS = {"ready": "ready_lists"}  # a group of keys whose method is not named after it
_SLOT = re.compile(r"^(KEYS|ARGV)\[(\d+)(\.\.(\d*))?\]\s+([a-z_]+)\b")
_FIELD = re.compile(r"^\s+\.([a-z_]+)\b")


class LayoutError(ValueError):
    """A header that does not parse, or a call that does not fit its layout."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One key or argument of a header, or a group of them (KEYS[first..last])."""

    name: str
    first: int  # 1-based, as Lua counts
    last: int | None  # inclusive; None: open, as many as the call brings
    group: bool = False  # written first..last: a list, even of one
    fields: tuple[str, ...] = ()  # a list of records: the fields of one, in order

    @property
    def text(self) -> str:
        """As the header writes its position: "3", "8..17" or "14.."."""
        if not self.group:
            return str(self.first)
        return f"{self.first}..{'' if self.last is None else self.last}"

    @property
    def size(self) -> int | None:
        return None if self.last is None else self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class Layout:
    """The KEYS and ARGV a script's header declares (see the module docstring)."""

    script: str
    key_slots: tuple[Slot, ...]
    arg_slots: tuple[Slot, ...]

    @classmethod
    def parse(cls, script: str, source: str) -> Layout:
        """The layout of ``source``'s header (the comment it opens with)."""
        header = source.split("]]", 1)[0]
        found: dict[str, list[Slot]] = {"KEYS": [], "ARGV": []}
        for part, slot in _slots(header.splitlines()):
            found[part].append(slot)
        layout = cls(script, tuple(found["KEYS"]), tuple(found["ARGV"]))
        for part, slots in (("KEYS", layout.key_slots), ("ARGV", layout.arg_slots)):
            _check_order(script, part, slots)
        return layout

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(slot.name for slot in self.key_slots)

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(slot.name for slot in self.arg_slots)

    def key(self, name: str) -> Slot:
        return self._find(self.key_slots, "KEYS", name)

    def arg(self, name: str) -> Slot:
        return self._find(self.arg_slots, "ARGV", name)

    @property
    def key_count(self) -> int:
        """How many keys every call declares (an error for an open layout)."""
        last = self.key_slots[-1].last if self.key_slots else 0
        if last is None:
            raise LayoutError(f"{self.script}.lua: its key count depends on the call")
        return last

    def expect(
        self, *, keys: Sequence[str] = (), args: Sequence[str] = (), last_key: str = ""
    ) -> None:
        """Raise unless KEYS (ARGV) begin with the slots ``keys`` (``args``), in order, and
        ``last_key`` is the last key: for call sites that pack a call from cached parts."""
        for part, have, want in (("KEYS", self.key_names, keys), ("ARGV", self.arg_names, args)):
            if tuple(have[: len(want)]) != tuple(want):
                raise LayoutError(f"{self.script}.lua: {part} are {have}, the caller packs {want}")
        if last_key and self.key_names[-1:] != (last_key,):
            raise LayoutError(f"{self.script}.lua: the caller packs {last_key} last")

    def expect_fields(self, name: str, fields: Sequence[str]) -> None:
        """Raise unless the records of ARGV group ``name`` have ``fields``, in order."""
        if self.arg(name).fields != tuple(fields):
            have = self.arg(name).fields
            raise LayoutError(f"{self.script}.lua: {name} are {have}, the caller packs {fields}")

    def keys(self, source: object, **given: str | bytes | Sequence[str]) -> list[str | bytes]:
        """KEYS in the header's order: ``given`` by name, the rest read from ``source``
        (a key object: a property per key, a method per group)."""
        out: list[str | bytes] = []
        for slot in self.key_slots:
            value = given.pop(slot.name, None)
            self._place(out, slot, _read(source, slot) if value is None else value)
        if given:
            raise LayoutError(f"{self.script}.lua declares no key {sorted(given)}")
        return out

    def args(self, **values: Arg | Sequence[Arg]) -> list[Arg]:
        """ARGV in the header's order, each by its name (a group: a sequence, flat)."""
        out: list[Arg] = []
        for slot in self.arg_slots:
            if slot.name not in values:
                raise LayoutError(f"{self.script}.lua: ARGV missing {slot.name}")
            self._place(out, slot, values.pop(slot.name))
        if values:
            raise LayoutError(f"{self.script}.lua declares no ARGV {sorted(values)}")
        return out

    def _place(self, out: list[Any], slot: Slot, value: Any) -> None:
        """Put ``value`` at ``slot``: one value, or a group's (a list or tuple, flat)."""
        if not slot.group:
            if isinstance(value, list | tuple):
                raise LayoutError(f"{self.script}.lua: {slot.name} is one value, not a list")
            out.append(value)
            return
        if not isinstance(value, list | tuple):
            raise LayoutError(f"{self.script}.lua: {slot.name} is a list")
        if slot.size is not None and len(value) != slot.size:
            raise LayoutError(f"{self.script}.lua: {slot.name} is {slot.size}, not {len(value)}")
        out += value

    def _find(self, slots: tuple[Slot, ...], part: str, name: str) -> Slot:
        for slot in slots:
            if slot.name == name:
                return slot
        raise LayoutError(f"{self.script}.lua declares no {part} {name!r}")


def _slots(lines: Sequence[str]) -> Iterator[tuple[str, Slot]]:
    """Each KEYS / ARGV line of a header, with the fields listed under it."""
    for index, line in enumerate(lines):
        match = _SLOT.match(line)
        if match is None:
            continue
        part, first, dots, last, name = match.groups()
        fields = []
        for following in lines[index + 1 :]:
            if _SLOT.match(following):
                break
            if field := _FIELD.match(following):
                fields.append(field.group(1))
        end = None if dots and not last else int(last or first)
        yield part, Slot(name, int(first), end, bool(dots), tuple(fields))


def _check_order(script: str, part: str, slots: tuple[Slot, ...]) -> None:
    expected = 1
    for slot in slots:
        if slot.first != expected or (slot.last is not None and slot.last < slot.first):
            raise LayoutError(f"{script}.lua: {part}[{slot.text}] {slot.name} out of order")
        if slot.last is None and slot is not slots[-1]:
            raise LayoutError(f"{script}.lua: only the last of {part} may be open")
        expected = (slot.last or 0) + 1
    names = [slot.name for slot in slots]
    if len(set(names)) != len(names):
        raise LayoutError(f"{script}.lua: {part} names repeat: {names}")


def _read(source: object, slot: Slot) -> str | Sequence[str]:
    """One key (a property of ``source``) or a group (its method)."""
    if not slot.group:
        value = getattr(source, slot.name)
        if not isinstance(value, str):
            raise LayoutError(f"{type(source).__name__}.{slot.name} is not a key")
        return value
    if slot.last is None:
        raise LayoutError(f"{slot.name}: a group of as many keys as the call brings is given")
    keys: Sequence[str] = getattr(source, GROUPS.get(slot.name, slot.name))()
    return keys
