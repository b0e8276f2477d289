"""docs/protocol.md and the Python side agree: every record field, payload field, status,
id rule and producer script slot (KEYS and ARGV, with the key each names) the page lists is
read from the code and the scripts' headers (``store/layout.py``) and compared."""

from __future__ import annotations

import inspect
import re

import pytest

from aioqueue.client.enqueue import RESERVED_ID_PREFIXES
from aioqueue.core import ids, payload
from aioqueue.core.keys import QueueKeys
from aioqueue.core.priorities import DEFAULT_PRIORITY, PRIORITY_NAMES
from aioqueue.core.records import Field, JobStatus
from aioqueue.store.layout import Slot
from aioqueue.store.loader import Script
from aioqueue.store.scripts.replies import CODES
from tests.conformance.runners import ROOT

DOC = (ROOT / "docs" / "protocol.md").read_text("utf-8")
KEYS = QueueKeys.for_queue("<prefix>", "<queue>")
PRODUCER_SCRIPTS = ("enqueue", "cancel")


def section(heading: str) -> str:
    """The text under ``heading`` up to the next heading of its level or higher."""
    level = heading.split(" ")[0]
    start = DOC.index(f"\n{heading}\n")
    ends = [m.start() for m in re.finditer(rf"\n#{{1,{len(level)}}} ", DOC) if m.start() > start]
    return DOC[start : min(ends, default=len(DOC))]


def table(text: str, first_column: str) -> list[list[str]]:
    """The rows of the table whose header starts with ``first_column``, cells stripped."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def code(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def test_the_version_is_the_payload_format() -> None:
    assert f"**Protocol version {payload.WIRE_VERSION}.**" in DOC


def test_record_fields_are_the_code_s() -> None:
    listed = [code(row[0])[0] for row in table(section("## Record"), "field")]
    fields = [value.decode() for name, value in vars(Field).items() if name.isupper()]
    missing, extra = sorted(set(fields) - set(listed)), sorted(set(listed) - set(fields))
    assert not missing, f"docs/protocol.md, Record: add the records.Field fields {missing}"
    assert not extra, f"docs/protocol.md, Record: {extra} are no records.Field"
    linked = re.search(r"also carry (.*?)\s\(", section("## Record"), re.S)
    assert linked is not None
    for name in code(linked.group(1)):  # the links' fields: named in records.py's docstring
        assert re.search(rf"\b{name}\b", inspect.getdoc(inspect.getmodule(Field)) or ""), name


def test_payload_fields_are_what_a_worker_reads() -> None:
    listed = {code(row[0])[0] for row in table(section("## Payload"), "field")}
    read = set(re.findall(r'body\.get\("(\w+)"', inspect.getsource(payload.Payload.decode)))
    written = set(re.findall(r'body\["(\w+)"\]', inspect.getsource(payload.encode_payload)))
    assert listed == read | written | {"t"}, "docs/protocol.md, Payload: the decoder's fields"


READER_ONLY = {"unknown"}
"""Statuses a Python reader may report that are no state in Redis (a record from a newer
program whose state it does not know)."""


def test_statuses_are_the_code_s() -> None:
    named = code(section("## Statuses"))
    assert sorted(named) == sorted({status.value for status in JobStatus} - READER_ONLY)
    assert {status.value for status in JobStatus if status.finished} == {
        "complete", "failed", "dead", "cancelled", "expired"
    }  # fmt: skip


def test_id_rules_are_the_code_s() -> None:
    text = section("## Job ids")
    assert f"`{ids.GENERATED_ID_ALPHABET.decode()}`" in text
    assert code(text)[: len(RESERVED_ID_PREFIXES)] == list(RESERVED_ID_PREFIXES)
    done = section("### Done sets")
    assert f"0..{ids.DONE_SLOTS - 1}" in done and f"at least {ids.GENERATED_SINCE}" in done
    assert f"mod {ids.DONE_SLOTS}" in done and f"{ids.GENERATED_ID_LENGTH} characters" in done
    assert f"`order-42` → `{ids.fingerprint(b'order-42')}`" in done  # the doc's worked example


def test_priorities_are_the_code_s() -> None:
    jobs = table(section("### enqueue.lua"), "job field")
    priority = {row[0]: row[1] for row in jobs}["priority"]
    assert f'({DEFAULT_PRIORITY}, "normal"' in priority
    assert '0 is "low", 9 "high"' in priority
    assert PRIORITY_NAMES == {"low": 0, "normal": 5, "high": 9}


def _slot_text(slot: Slot) -> str:
    return slot.text


@pytest.mark.parametrize("name", PRODUCER_SCRIPTS)
def test_script_slots_are_the_header_s(name: str) -> None:
    layout = Script(name).layout
    text = section(f"### {name}.lua")
    keys = table(text, "KEYS")
    assert [(row[0], row[1]) for row in keys] == [(_slot_text(s), s.name) for s in layout.key_slots]
    for row, slot in zip(keys, layout.key_slots, strict=True):
        assert code(row[2]) == documented_keys(slot), f"{name}.lua KEYS[{slot.text}]"
    args = table(text, "ARGV")
    assert [(row[0], row[1]) for row in args] == [(_slot_text(s), s.name) for s in layout.arg_slots]
    for slot in layout.arg_slots:
        if slot.fields:
            listed = [row[0] for row in table(text, "job field")]
            assert listed == list(slot.fields), f"{name}.lua ARGV {slot.name}'s fields"


def documented_keys(slot: Slot) -> list[str]:
    """The keys the page should write for a slot, from QueueKeys as the wrappers use it."""
    if slot.name == "ready":
        if slot.last is None:
            return [KEYS.ready_prefix + "<p>"]
        ready = KEYS.ready_lists()
        return [ready[0], ready[-1]]
    if slot.group:
        return list(getattr(KEYS, slot.name)())
    return [getattr(KEYS, slot.name)]


def test_cancel_codes_are_the_code_s() -> None:
    rows = table(section("### cancel.lua"), "code")
    assert {int(row[0]) for row in rows} == set(CODES["cancel"])


def test_settled_channel_and_channels_are_named_by_keys() -> None:
    assert f"`{KEYS.settled_channel}`" in section("### Waiting for a result")
    arguments = {row[1]: code(row[2]) for row in table(section("### cancel.lua"), "ARGV")}
    assert arguments["abort_channel"] == [KEYS.abort_channel]
    assert arguments["settled_channel"] == [KEYS.settled_channel]
    assert f"`{KEYS.done(0, 0, 0).rsplit(':', 4)[0]}:donefp:<w>:<g>:<s>`" in DOC
