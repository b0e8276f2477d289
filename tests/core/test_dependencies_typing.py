"""What a type checker makes of ``Depends()`` on the caller's side: mypy (strict) checks
this file with the rest of the suite, so each ``assert_type`` and each ``type: ignore`` is
a claim it verifies (strict mode reports an ignore that is not needed). At run time, the
same calls show what the enqueue refuses.

Why the spelling ``db: Pool = Depends(get_db)``: ``Task[P, R]`` takes the handler's
ParamSpec, so a parameter with no default is one ``enqueue`` must be given, for mypy. With
``Depends()`` as its default (typed as returning what the provider provides), the injected
parameter is optional for mypy and the job's own arguments stay checked; passing it
anyway is refused when the enqueue runs. ``Annotated[Pool, Depends(get_db)]`` alone (no
default) works at run time, but mypy then asks every enqueue for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Annotated, assert_type

import pytest

import aioqueue
from aioqueue import Depends


class Pool:
    pass


class Settings:
    region = "eu"


async def open_pool() -> AsyncIterator[Pool]:  # an async generator: cleanup after yield
    yield Pool()


def session(pool: Pool = Depends(open_pool, scope="worker")) -> Iterator[str]:
    yield "session"


async def load_settings() -> Settings:
    return Settings()


def region(settings: Settings = Depends(load_settings)) -> str:
    return settings.region


app = aioqueue.App(redis_url="redis://127.0.0.1:1/0")  # nothing here reaches a server


@app.task
async def save(
    row: dict[str, int],
    *,
    pool: Pool = Depends(open_pool, scope="worker"),
    session: str = Depends(session),
    region: str = Depends(region),
) -> int:
    return len(row)


@app.task
async def annotated_only(row: int, pool: Annotated[Pool, Depends(open_pool)]) -> None:
    return None


def test_depends_is_typed_as_what_its_provider_provides() -> None:
    assert_type(Depends(open_pool), Pool)  # async generator
    assert_type(Depends(session), str)  # generator
    assert_type(Depends(load_settings), Settings)  # coroutine function
    assert_type(Depends(region), str)  # plain function
    assert_type(Depends(aioqueue.current_job), aioqueue.JobContext)


def test_the_enqueue_of_a_task_with_injected_parameters_type_checks_without_them() -> None:
    call = save.enqueue({"a": 1})  # (an EnqueueCall sends nothing until awaited)
    assert_type(call, aioqueue.EnqueueCall[int])


def test_its_job_arguments_are_still_checked() -> None:
    save.enqueue("not a dict")  # type: ignore[arg-type]
    save.enqueue()  # type: ignore[call-arg]


def test_without_a_default_the_type_checker_asks_for_the_injected_parameter() -> None:
    annotated_only.enqueue(1)  # type: ignore[call-arg]


async def test_passing_an_injected_parameter_is_refused_when_the_enqueue_runs() -> None:
    with pytest.raises(aioqueue.InvalidArguments) as caught:
        await save.enqueue({"a": 1}, pool=Pool())  # type-checks: refused here, nothing sent

    assert str(caught.value) == (
        "task 'save' cannot take these arguments: parameter 'pool' (Depends(open_pool, "
        "scope='worker')) is filled by the worker, not a job argument: leave it out"
    )
    with pytest.raises(aioqueue.InvalidArguments, match=r"'region' \(Depends\(region\)\)"):
        await app.queue().enqueue("save", {"a": 1}, region="us")  # by name: the same check
