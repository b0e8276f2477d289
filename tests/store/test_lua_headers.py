"""Every file in ``store/lua`` is one script with one typed wrapper, a header that states
its contract (its KEYS and ARGV, read into ``Script.layout``), first lines that bind what
the header states to locals of the same names, and return codes read in one table."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

import aioqueue
from aioqueue.core.keys import ChannelKeys, QueueKeys, TopicKeys
from aioqueue.store import scripts
from aioqueue.store.layout import Layout, Slot
from aioqueue.store.scripts import admin, enqueues, leasing, links, mailboxes, replies, topics

PACKAGE = Path(aioqueue.__file__).parent
SCRIPTS_DIR = PACKAGE / "store" / "scripts"
FAMILIES: list[ModuleType] = [enqueues, leasing, links, admin, mailboxes, topics]
LUA_FILES = sorted(path.stem for path in (PACKAGE / "store" / "lua").glob("*.lua"))
LAYOUTS = {script.name: script.layout for script in scripts.ALL_SCRIPTS}


def _script_names(module: Path) -> list[str]:
    """The names passed to ``Script("<name>")`` calls in ``module``."""
    tree = ast.parse(module.read_text("utf-8"))
    return [
        str(node.args[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Script"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


def test_every_lua_file_has_exactly_one_script_and_back() -> None:
    names = [name for module in SCRIPTS_DIR.glob("*.py") for name in _script_names(module)]
    assert len(names) == len(set(names))
    assert sorted(names) == LUA_FILES
    assert len(LUA_FILES) >= 9
    assert sorted(script.name for script in scripts.ALL_SCRIPTS) == LUA_FILES


@pytest.mark.parametrize("name", LUA_FILES)
def test_lua_header_states_its_contract(name: str) -> None:
    source = (PACKAGE / "store" / "lua" / f"{name}.lua").read_text("utf-8")
    assert source.startswith(f"--[[ {name}:"), "the header opens with the script's name"
    assert "Returns" in source.split("]]", 1)[0], f"{name}.lua header does not say what it returns"
    layout = LAYOUTS[name]
    assert layout.key_slots, f"{name}.lua header states no KEYS"
    assert layout.arg_slots, f"{name}.lua header states no ARGV"


@pytest.mark.parametrize("name", LUA_FILES)
def test_every_lua_file_has_a_typed_wrapper(name: str) -> None:
    """In the family module that loads the script, and in no other."""
    owners = [
        module for module in FAMILIES if inspect.iscoroutinefunction(getattr(module, name, None))
    ]
    assert len(owners) == 1, f"{name}() is in {[module.__name__ for module in owners]}"
    assert name in _script_names(Path(str(owners[0].__file__)))


def test_the_return_codes_are_read_in_one_table() -> None:
    """Codes are given meaning in ``replies.CODES`` alone: no other table of codes."""
    for module in SCRIPTS_DIR.glob("*.py"):
        tree = ast.parse(module.read_text("utf-8"))
        tables = [node for node in ast.walk(tree) if isinstance(node, ast.Dict) and _int_keys(node)]
        expected = len(replies.CODES) if module.stem == "replies" else 0
        assert len(tables) == expected, module.name  # the inner tables of CODES, no others
    assert scripts.CODES is replies.CODES
    for name in replies.CODES:
        assert name in LUA_FILES


def _int_keys(table: ast.Dict) -> bool:
    keys = [key.operand if isinstance(key, ast.UnaryOp) else key for key in table.keys]
    return bool(keys) and all(
        isinstance(key, ast.Constant) and isinstance(key.value, int) for key in keys
    )


# -- the layouts: Python's side ------------------------------------------------------------


def _key_object(name: str) -> QueueKeys | ChannelKeys | TopicKeys:
    if name.startswith("topic_"):
        return TopicKeys.of("p", "t")
    if name.startswith("channel_"):
        return ChannelKeys.of("p", "group", "g")
    return QueueKeys.for_queue("p", "q")


@pytest.mark.parametrize("name", LUA_FILES)
def test_every_key_a_header_names_is_a_key_of_the_key_object(name: str) -> None:
    """A header's key names are the key object's: a property per key, a method per group
    (of as many keys as the header says), a method of one argument for a key given per
    call (a lease's list, a job's record), and for an open group the caller's list."""
    layout, source = LAYOUTS[name], _key_object(name)
    given: dict[str, str | list[str]] = {}
    for slot in layout.key_slots:
        if slot.last is None:
            given[slot.name] = [source.ready(5)] if isinstance(source, QueueKeys) else []
        elif not slot.group and callable(getattr(source, slot.name)):
            given[slot.name] = getattr(source, slot.name)("x")
    script_keys = layout.keys(source, **given)
    assert all(str(key).startswith(source.base) for key in script_keys)  # one Cluster slot
    assert len(script_keys) == len(set(script_keys))


def test_a_call_that_does_not_fit_its_layout_is_refused() -> None:
    keys = QueueKeys.for_queue("p", "q")
    layout = LAYOUTS["reschedule"]
    with pytest.raises(ValueError, match="declares no key"):
        layout.keys(keys, job="j", nowhere="x")
    with pytest.raises(ValueError, match="ARGV missing"):
        layout.args(id="j", delay_ms=0)
    with pytest.raises(ValueError, match="is a list"):
        LAYOUTS["purge"].args(limit=1, ids="abc")
    with pytest.raises(ValueError, match="is one value"):
        layout.args(id=["j"], delay_ms=0, due_ms=0)
    with pytest.raises(ValueError, match="is 5, not 4"):
        LAYOUTS["cancel"].keys(keys, links=keys.links()[:4])
    with pytest.raises(ValueError, match="the caller packs"):
        LAYOUTS["take"].expect(args=("lease", "limit"))
    with pytest.raises(ValueError, match="the caller packs"):
        LAYOUTS["take"].expect(last_key="active")
    with pytest.raises(ValueError, match="the caller packs"):
        LAYOUTS["ack"].expect_fields("settlements", ("id", "outcome"))


@pytest.mark.parametrize(
    ("header", "error"),
    [
        ("KEYS[1] a\nKEYS[3] b\nARGV[1] x", "out of order"),
        ("KEYS[1..] a\nKEYS[2] b\nARGV[1] x", "only the last"),
        ("KEYS[1] a\nKEYS[2] a\nARGV[1] x", "repeat"),
        ("KEYS[2..1] a\nARGV[1] x", "out of order"),
    ],
)
def test_a_header_out_of_order_is_refused(header: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Layout.parse("s", f"--[[ s: x\n{header}\n]]\nreturn 1\n")


def test_a_header_states_groups_and_the_fields_of_records() -> None:
    layout = Layout.parse(
        "s",
        "--[[ s: x\nKEYS[1]     one   a key\nKEYS[2..3]  two   a group\n"
        "KEYS[4..]   rest  as many as the call has\nARGV[1]     n     a number\n"
        "ARGV[2..]   jobs  two each:\n  .id    its id\n         (more on the id)\n"
        "  .size  its size\nReturns 1.\n]]\n",
    )
    assert layout.key_slots == (
        Slot("one", 1, 1),
        Slot("two", 2, 3, group=True),
        Slot("rest", 4, None, group=True),
    )
    assert layout.arg_slots == (Slot("n", 1, 1), Slot("jobs", 2, None, True, ("id", "size")))


# -- the layouts: Lua's side ---------------------------------------------------------------

_INDEX = re.compile(r"\b(KEYS|ARGV)\[(\d+)\]")
_ONE_ARG = re.compile(r"^(?:tonumber\(|cjson\.decode\()?ARGV\[(\d+)\]\)?(?: == '1')?$")


def _first_lines(name: str) -> tuple[list[str], str]:
    """The script's leading ``local`` statements (after its includes), and the rest."""
    code = (PACKAGE / "store" / "lua" / f"{name}.lua").read_text("utf-8").split("]]\n", 1)[1]
    lines = [line for line in code.splitlines() if not line.startswith("-- @include")]
    first = 0
    while first < len(lines) and lines[first].startswith("local "):
        first += 1
    return lines[:first], "\n".join(lines[first:])


def _bindings(lines: list[str]) -> list[tuple[str, str]]:
    """(local, expression) of each name bound on ``lines``, comments dropped."""
    pairs: list[tuple[str, str]] = []
    for line in lines:
        names, _, values = line.split(" --")[0].removeprefix("local ").partition(" = ")
        expressions = _split_top_level(values) if values else []
        if len(expressions) == len(names.split(", ")):
            pairs += zip(names.split(", "), expressions, strict=True)
    return pairs


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = start = 0
    for index, char in enumerate(text):
        depth += (char in "({") - (char in ")}")
        if char == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    return [*parts, text[start:].strip()]


def _bound_slot(layout: Layout, local: str, expression: str) -> tuple[str, Slot] | None:
    """The header slot a binding stands for, checked against the header; None if it binds
    no position (a local computed from others)."""
    key, arg = re.fullmatch(r"KEYS\[(\d+)\]", expression), _ONE_ARG.fullmatch(expression)
    if found := key or arg:
        part, slots = ("KEYS", layout.key_slots) if key else ("ARGV", layout.arg_slots)
        position = int(found.group(1))
        (slot,) = (slot for slot in slots if slot.first == position and not slot.group)
        assert local in (slot.name, f"{slot.name}_key"), f"{part}[{position}] is {slot.name}"
        return part, slot
    if local.isupper() and expression.isdigit():  # the first position of a group
        groups = [
            (part, slot)
            for part, slots in (("KEYS", layout.key_slots), ("ARGV", layout.arg_slots))
            for slot in slots
            if slot.group and slot.name == local.lower()
        ]
        assert len(groups) == 1, f"{local}: the header has no group {local.lower()}"
        assert groups[0][1].first == int(expression), f"{local} = {expression}, not its first"
        return groups[0]
    return None


@pytest.mark.parametrize("name", LUA_FILES)
def test_the_first_lines_bind_what_the_header_states(name: str) -> None:
    """Every key (a group: its first position, as a constant that snippets are given) and
    every single argument is bound to a local of its header name on the script's first
    lines, and no position is written as a bare number anywhere else."""
    layout = LAYOUTS[name]
    first_lines, rest = _first_lines(name)
    bound = {
        found
        for local, expression in _bindings(first_lines)
        if (found := _bound_slot(layout, local, expression)) is not None
    }
    expected = {("KEYS", slot) for slot in layout.key_slots}
    expected |= {("ARGV", slot) for slot in layout.arg_slots}
    assert bound == expected, f"unbound: {sorted(slot.name for _, slot in expected - bound)}"
    assert _INDEX.findall(rest) == [], "a position written as a number past the first lines"
