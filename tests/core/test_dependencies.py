"""A handler's ``Depends()`` read at registration (core/dependencies.py): what is injected,
by which providers in which order, what stays a job argument, and what is refused at
once (never at the first job)."""

from __future__ import annotations

import datetime
import functools
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import fastapi
import orjson
import pytest

import aioqueue
from aioqueue import Depends
from aioqueue.core.arguments import check_sent, decoder_for
from aioqueue.core.dependencies import Dependency, job_signature
from aioqueue.core.errors import ConfigError, SerializationError
from aioqueue.core.handlers import Handler, TaskOptions, check_subscriber
from aioqueue.core.payload import encode_payload

if TYPE_CHECKING:
    from collections import OrderedDict  # resolvable only by a type checker


class Pool:
    pass


def get_settings() -> dict[str, str]:
    return {"dsn": "x"}


async def get_pool(settings: dict[str, str] = Depends(get_settings)) -> AsyncIterator[Pool]:
    yield Pool()


def get_session(
    pool: Pool = Depends(get_pool), job: aioqueue.JobContext | None = None
) -> Iterator[str]:
    yield "session"


def get_context(job: aioqueue.JobContext) -> str:
    return job.id


# Annotations are strings here (``from __future__ import annotations``): an Annotated
# marker resolves from module globals, so these providers live at module level.
def cycle_first(value: Annotated[int, Depends(cycle_second)]) -> int:
    return value


def cycle_second(value: Annotated[int, Depends(cycle_first)]) -> int:
    return value


def handler(fn: Any) -> Handler[..., Any]:
    return Handler(fn, TaskOptions(name=fn.__name__, queue="q"))


def refused(fn: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        handler(fn)
    return str(caught.value)


# -- what is injected, and in which order -------------------------------------------------


def test_a_handler_without_depends_has_no_plan() -> None:
    async def plain(x: int, y: str = "a", *rest: int, **named: Any) -> None: ...

    task = handler(plain)

    assert task.injection is None
    assert list(task.signature.parameters) == ["x", "y", "rest", "named"]


def test_providers_come_after_those_they_need_and_each_once() -> None:
    async def save(
        row: dict[str, int],
        *,
        session: str = Depends(get_session),
        pool: Pool = Depends(get_pool),  # also needed by get_session: one provider
        job_id: Annotated[str, Depends(get_context)],
    ) -> None: ...

    plan = handler(save).injection

    assert plan is not None
    assert [name for name, _ in plan.parameters] == ["session", "pool", "job_id"]
    assert [step.name for step in plan.steps] == [
        "get_settings", "get_pool", "get_session", "get_context",
    ]  # fmt: skip
    assert [step.kind for step in plan.steps] == ["sync", "agen", "gen", "sync"]
    session, pool = plan.steps[2], plan.steps[1]
    assert session.needs == (("pool", pool),)  # job: has a default, is not annotated JobContext
    assert plan.steps[3].needs == (("job", None),)  # None: the JobContext
    assert plan.worker == ()
    assert list(plan.job_signature.parameters) == ["row"]


def test_worker_scoped_providers_are_listed_apart() -> None:
    async def open_pool() -> AsyncIterator[Pool]:
        yield Pool()

    def get_session(pool: Pool = Depends(open_pool, scope="worker")) -> str:
        return "session"

    async def save(row: int, session: str = Depends(get_session)) -> None: ...

    plan = handler(save).injection

    assert plan is not None
    assert [step.name for step in plan.worker] == [open_pool.__qualname__]
    assert [step.name for step in plan.steps] == [get_session.__qualname__]
    assert plan.steps[0].needs == (("pool", plan.worker[0]),)


def test_string_annotations_are_read_too() -> None:
    """``from __future__ import annotations`` (this module's): Annotated markers resolve."""

    async def save(row: int, pool: Annotated[Pool, Depends(get_pool)]) -> None: ...

    plan = handler(save).injection

    assert plan is not None
    assert plan.parameters[0][0] == "pool"
    assert isinstance(save.__annotations__["pool"], str)


def test_any_provider_shape_is_a_provider() -> None:
    class Settings:
        def __init__(self, job: aioqueue.JobContext) -> None:
            self.job = job

    class Counter:
        async def __call__(self) -> int:
            return 1

    async def scaled(factor: int) -> int:
        return factor

    count = Counter()

    async def run(
        settings: Settings = Depends(Settings),
        counted: int = Depends(count),
        scaled: int = Depends(functools.partial(scaled, 3)),
    ) -> None: ...

    plan = handler(run).injection

    assert plan is not None
    assert [step.kind for step in plan.steps] == ["sync", "async", "async"]
    assert plan.steps[0].needs == (("job", None),)


def test_fastapi_markers_are_read_as_job_scoped_depends() -> None:
    """The same provider functions serve FastAPI and aioqueue: a provider written with
    FastAPI's Depends for its own needs works here as it is."""

    def get_repo(settings: dict[str, str] = fastapi.Depends(get_settings)) -> str:
        return settings["dsn"]

    async def run(
        repo: str = fastapi.Depends(get_repo), session: str = fastapi.Security(get_session)
    ) -> None: ...

    plan = handler(run).injection

    assert plan is not None
    assert [step.name for step in plan.steps] == [
        "get_settings", get_repo.__qualname__, "get_pool", "get_session",
    ]  # fmt: skip
    assert {step.scope for step in plan.steps} == {"job"}


def test_depends_is_a_marker_typed_as_what_it_provides() -> None:
    marker: Any = Depends(get_pool, scope="worker")

    assert isinstance(marker, Dependency)
    assert (marker.provider, marker.scope) == (get_pool, "worker")
    assert repr(marker) == "Depends(get_pool, scope='worker')"


# -- job arguments: the signature without the injected parameters -------------------------


async def save_row(
    row: dict[str, int], when: datetime.date, *, pool: Pool = Depends(get_pool)
) -> None: ...


def test_enqueue_arguments_bind_without_the_injected_parameters() -> None:
    task = handler(save_row)

    task.check_arguments(({"a": 1}, "2024-01-01"), {})
    task.check_arguments(({"a": 1},), {"when": "2024-01-01"})
    with pytest.raises(TypeError, match=r"missing a required argument: 'when'"):
        task.check_arguments(({"a": 1},), {})


def test_an_injected_parameter_passed_at_enqueue_is_refused_by_name() -> None:
    task = handler(save_row)

    with pytest.raises(TypeError) as caught:
        task.check_arguments(({"a": 1}, "2024-01-01"), {"pool": "mine"})

    assert str(caught.value) == (
        "parameter 'pool' (Depends(get_pool)) is filled by the worker, not a job argument: "
        "leave it out"
    )


def test_an_injected_name_is_refused_even_where_kwargs_would_take_it() -> None:
    async def log(message: str, pool: Pool = Depends(get_pool), **extra: Any) -> None: ...

    task = handler(log)
    task.check_arguments(("hi",), {"level": "info"})  # **extra takes those

    with pytest.raises(TypeError, match=r"'pool' \(Depends\(get_pool\)\) is filled by the worker"):
        task.check_arguments(("hi",), {"pool": 1})


def test_too_many_positional_arguments_say_what_is_injected() -> None:
    task = handler(save_row)

    with pytest.raises(TypeError) as caught:
        task.check_arguments(({"a": 1}, "2024-01-01", "pool?"), {})

    assert str(caught.value) == (
        "too many positional arguments (not counting 'pool' (Depends(get_pool)), which the "
        "worker fills)"
    )


def test_the_decoder_and_the_sent_check_leave_injected_parameters_out() -> None:
    decoder = decoder_for(save_row)
    assert decoder is not None
    assert decoder.decode([{"a": 1}, "2024-01-01"], {})[0] == [{"a": 1}, datetime.date(2024, 1, 1)]
    assert decoder.named("pool") is None
    signature = job_signature(save_row)
    assert signature is not None and list(signature.parameters) == ["row", "when"]

    raw = encode_payload("save_row", [{"a": 1}, {1, 2}], {}, None, 10_000)
    with pytest.raises(SerializationError, match=r"argument 'when' is a set"):
        check_sent(raw, [{"a": 1}, {1, 2}], {}, task="save_row", handler=save_row, decoder=decoder)


def test_nothing_injected_reaches_a_payload() -> None:
    """What an enqueue encodes is what it was given: injected values have no way in."""
    raw = encode_payload("save_row", [{"a": 1}, "2024-01-01"], {}, None, 10_000)
    assert set(orjson.loads(raw)) >= {"a"} and "pool" not in raw.decode()


def test_calling_the_handler_in_process_needs_its_injected_values() -> None:
    def add(x: int, *, offset: int = Depends(lambda: 1)) -> int:
        return x + offset

    task = handler(add)

    assert task(1, offset=2) == 3
    with pytest.raises(TypeError, match=r"add: called in-process, its injected parameter\(s\) "):
        task(1)


def test_a_subscriber_takes_the_body_and_what_it_declares() -> None:
    async def on_event(body: Any, pool: Annotated[Pool, Depends(get_pool)]) -> None: ...

    async def two(body: Any, other: Any, pool: Pool = Depends(get_pool)) -> None: ...

    check_subscriber(on_event, "events", "g")
    with pytest.raises(ConfigError, match="must take the message body as its one argument"):
        check_subscriber(two, "events", "g")


# -- refused at registration ---------------------------------------------------------------


def test_a_positional_only_injected_parameter_is_refused() -> None:
    async def save(pool: Annotated[Pool, Depends(get_pool)], /, row: int) -> None: ...

    assert refused(save) == (
        "task 'save': parameter 'pool' is positional-only, so the job's arguments would fill "
        "it; an injected parameter (Depends) is passed by name"
    )


def test_an_injected_parameter_before_a_positional_one_is_refused() -> None:
    async def save(pool: Annotated[Pool, Depends(get_pool)], row: int) -> None: ...

    async def spread(pool: Annotated[Pool, Depends(get_pool)], *rows: int) -> None: ...

    assert refused(save) == (
        "task 'save': injected parameter 'pool' comes before 'row', which the job's arguments "
        "fill by position: put injected parameters last, or after a '*' (keyword-only)"
    )
    assert "comes before 'rows'" in refused(spread)


def test_keyword_only_parameters_may_follow_an_injected_one() -> None:
    async def save(row: int, pool: Annotated[Pool, Depends(get_pool)], *, when: str) -> None: ...

    task = handler(save)
    task.check_arguments((1,), {"when": "now"})


def test_variadic_parameters_cannot_be_injected() -> None:
    async def save(*pools: Annotated[Pool, Depends(get_pool)]) -> None: ...

    assert "*pools or **pools cannot be injected" in refused(save)


def test_a_provider_cycle_is_refused_naming_it() -> None:
    """A cycle needs late binding: annotations read once both functions exist."""

    async def run(value: int = Depends(cycle_first)) -> None: ...

    assert refused(run) == (
        "provider cycle_second, parameter 'value': providers that depend on each other in a "
        "cycle: cycle_first -> cycle_second -> cycle_first"
    )


def test_a_worker_scoped_provider_that_needs_a_job_scoped_one_is_refused() -> None:
    async def open_pool(settings: dict[str, str] = Depends(get_settings)) -> Pool:
        return Pool()

    async def run(pool: Pool = Depends(open_pool, scope="worker")) -> None: ...

    message = refused(run)
    assert message.endswith(
        "open_pool, parameter 'settings': a worker-scoped provider cannot depend on "
        "job-scoped get_settings: declare it Depends(get_settings, scope='worker')"
    ), message


def test_a_worker_scoped_provider_cannot_take_the_job_context() -> None:
    def per_job(job: aioqueue.JobContext) -> str:
        return job.id

    async def run(name: str = Depends(per_job, scope="worker")) -> None: ...

    assert "a worker-scoped provider cannot take the JobContext" in refused(run)


def test_a_provider_parameter_nothing_fills_is_refused() -> None:
    def needs_dsn(dsn: str) -> str:
        return dsn

    async def run(value: str = Depends(needs_dsn)) -> None: ...

    assert refused(run).endswith(
        "provider test_a_provider_parameter_nothing_fills_is_refused.<locals>.needs_dsn: its "
        "parameter 'dsn' is neither Depends(...) nor the JobContext (by its annotation), and "
        "has no default: nothing can fill it"
    )


def test_an_annotation_that_does_not_resolve_is_refused_when_it_names_depends() -> None:
    async def run(ordered: Annotated[OrderedDict[str, int], Depends(get_settings)]) -> None: ...

    async def fine(ordered: OrderedDict[str, int]) -> None: ...  # no Depends: left alone

    message = refused(run)
    assert "the annotation of parameter 'ordered'" in message
    assert "does not resolve at run time, so its Depends() cannot be read" in message
    assert handler(fine).injection is None


def test_two_different_markers_on_one_parameter_are_refused() -> None:
    def other_pool() -> Pool:
        return Pool()

    async def run(pool: Annotated[Pool, Depends(get_pool)] = Depends(other_pool)) -> None: ...

    assert "has two different Depends()" in refused(run)


def test_depends_refuses_what_cannot_provide() -> None:
    with pytest.raises(ConfigError, match="takes a function that provides a value, not 3"):
        Depends(3)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="scope must be 'job' or 'worker'"):
        Depends(get_pool, scope="app")  # type: ignore[call-overload]


def test_registration_refuses_it_through_the_app() -> None:
    """``@app.task`` raises at decoration: the module that declares it does not import."""
    app = aioqueue.App(redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(ConfigError, match="positional-only"):

        @app.task
        async def save(pool: Annotated[Pool, Depends(get_pool)], /) -> None: ...

    def needs_dsn(dsn: str) -> Pool:
        return Pool()

    with pytest.raises(ConfigError, match="parameter 'dsn' is neither Depends"):

        @app.subscriber("events", group="g")
        async def on_event(body: Any, pool: Pool = Depends(needs_dsn)) -> None: ...

    assert app.tasks == {} and app.subscribers == {}
