"""Dependencies a handler declares: ``db: Pool = Depends(get_db)`` (or ``db: Annotated[Pool,
Depends(get_db)]``) on a parameter, filled by the worker for each job, or once per worker
(``scope="worker"``); never a job argument.

``injection_for`` reads a handler's signature once, when it is registered, into an
``Injection``: which parameters are injected, by which providers, the order to call the
job-scoped ones in (each after those it needs, each once per job), the worker-scoped ones
it needs, and the handler's signature without them (``job_signature``: what an enqueue
binds). A handler without any gets None, so that a worker pays one truth test per job.

What could only fail later is refused here, with a ConfigError naming the parameter or
provider: an injected parameter an enqueue's arguments could fill (positional-only, or
before a positional parameter of the job's), a provider cycle, a provider parameter that
nothing fills, a worker-scoped provider that needs a job (a job-scoped provider, or the
JobContext). Markers are aioqueue's ``Depends`` or FastAPI's (recognised by their class,
without importing FastAPI), so that provider functions written for one work in the other.
Resolving them is the worker's business (``worker/injection.py``). Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from .errors import ConfigError
from .middleware import JobContext

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

T = TypeVar("T")
Scope = Literal["job", "worker"]
Kind = Literal["sync", "async", "gen", "agen"]  # def, async def, def + yield, async def + yield

_SCOPES = ("job", "worker")
_EMPTY = inspect.Parameter.empty
_P = inspect.Parameter
_VARIADIC = (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)


@dataclass(frozen=True, slots=True, eq=False)
class Dependency:
    """What ``Depends(provider)`` returns: a marker on a parameter (its default, or its
    ``Annotated`` metadata) saying who provides its value, and for how long."""

    provider: Callable[..., Any]
    scope: Scope = "job"

    @property
    def key(self) -> tuple[Callable[..., Any], Scope]:
        """What identifies a provider within a job: its function and its scope."""
        return (self.provider, self.scope)

    def __repr__(self) -> str:
        scope = ", scope='worker'" if self.scope == "worker" else ""
        return f"Depends({provider_name(self.provider)}{scope})"


@overload
def Depends(provider: Callable[..., AsyncIterator[T]], *, scope: Scope = "job") -> T: ...
@overload
def Depends(provider: Callable[..., Iterator[T]], *, scope: Scope = "job") -> T: ...
@overload
def Depends(provider: Callable[..., Awaitable[T]], *, scope: Scope = "job") -> T: ...
@overload
def Depends(provider: Callable[..., T], *, scope: Scope = "job") -> T: ...


def Depends(provider: Callable[..., Any], *, scope: Scope = "job") -> Any:
    """Declare a handler's parameter as injected: ``db: Pool = Depends(get_db)``.

    ``provider`` is a function (``def`` or ``async def``) or a generator (``def`` or
    ``async def`` with one ``yield``: the code after it runs when the job ends, however
    it ends, with the job's exception thrown in as a ``with`` block does). Its own
    parameters may be ``Depends(...)`` too, or the ``JobContext`` (by its annotation).
    ``scope="job"`` (default): called for each job, once however many need it;
    ``scope="worker"``: called once when the worker starts, closed when it stops.

    Typed as returning what the provider provides, so that a type checker takes the
    parameter as optional: ``task.enqueue(...)`` neither takes nor asks for it.
    """
    if not callable(provider):
        raise ConfigError(f"Depends() takes a function that provides a value, not {provider!r}")
    if scope not in _SCOPES:
        raise ConfigError(f"Depends({provider_name(provider)}): scope must be 'job' or 'worker'")
    return Dependency(provider, scope)


@dataclass(frozen=True, slots=True, eq=False)
class Provider:
    """One provider in a plan: how to call it and what fills its parameters (``needs``:
    parameter name -> the Provider whose value it gets, None for the JobContext)."""

    fn: Callable[..., Any]
    scope: Scope
    kind: Kind
    needs: tuple[tuple[str, Provider | None], ...]
    name: str


@dataclass(frozen=True, slots=True)
class Injection:
    """A handler's dependencies, read once at registration."""

    parameters: tuple[tuple[str, Provider], ...]  # injected parameter -> its provider
    steps: tuple[Provider, ...]  # the job-scoped providers, each after those it needs
    worker: tuple[Provider, ...]  # the worker-scoped ones it needs, likewise ordered
    job_signature: inspect.Signature  # the handler's, without the injected parameters

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.parameters)

    def describe(self, name: str) -> str:
        """``'db' (Depends(get_db))``: an injected parameter as errors name it."""
        provider = dict(self.parameters)[name]
        scope = ", scope='worker'" if provider.scope == "worker" else ""
        return f"{name!r} (Depends({provider.name}{scope}))"


def provider_name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def injection_for(fn: Callable[..., Any], what: str) -> Injection | None:
    """The dependencies of handler ``fn`` (``what``: how errors name it, "task 'x'"), or
    None if it has none. Raises ConfigError on what could not work (module docstring)."""
    signature = _signature(fn, what)
    markers = _markers(fn, signature, what)
    if not markers:
        return None
    _check_positions(signature, markers, what)
    planner = _Planner()
    parameters = tuple(
        (name, planner.provider(marker, (), f"{what}, parameter {name!r}"))
        for name, marker in markers.items()
    )
    kept = [p for name, p in signature.parameters.items() if name not in markers]
    return Injection(
        parameters, tuple(planner.steps), tuple(planner.worker), signature.replace(parameters=kept)
    )


def job_signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``fn``'s signature without its injected parameters (what its jobs' arguments bind
    to); None if it has no signature or its dependencies are not valid."""
    try:
        signature = inspect.signature(fn)
        markers = _markers(fn, signature, "handler")
    except (TypeError, ValueError):  # (ConfigError is a ValueError)
        return None
    return signature.replace(
        parameters=[p for name, p in signature.parameters.items() if name not in markers]
    )


# -- reading signatures ------------------------------------------------------------------


def _signature(fn: Callable[..., Any], what: str) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what}: cannot read its signature: {exc}") from exc


def _markers(
    fn: Callable[..., Any], signature: inspect.Signature, what: str
) -> dict[str, Dependency]:
    """The parameters that carry a marker (as their default or in ``Annotated``)."""
    found: dict[str, Dependency] = {}
    for name, parameter in signature.parameters.items():
        default = _as_dependency(parameter.default)
        annotated = _annotated_marker(fn, parameter, what)
        same = default and annotated and default.key == annotated.key
        if default and annotated and not same:
            raise ConfigError(
                f"{what}: parameter {name!r} has two different Depends(), {annotated!r} in its "
                f"annotation and {default!r} as its default"
            )
        if marker := default or annotated:
            found[name] = marker
    return found


def _annotated_marker(
    fn: Callable[..., Any], parameter: inspect.Parameter, what: str
) -> Dependency | None:
    """A marker in the parameter's ``Annotated[...]`` metadata. A string annotation (``from
    __future__ import annotations``) is resolved only if it mentions Depends: one that
    does but does not resolve is an error (its marker would be missed silently)."""
    annotation = parameter.annotation
    if isinstance(annotation, str):
        if "Depends(" not in annotation and "Security(" not in annotation:
            return None
        annotation = _resolve(fn, parameter, what)
    if typing.get_origin(annotation) is not typing.Annotated:
        return None
    markers = [m for m in map(_as_dependency, annotation.__metadata__) if m is not None]
    return markers[-1] if markers else None


def _resolve(fn: Callable[..., Any], parameter: inspect.Parameter, what: str) -> Any:
    namespace = getattr(inspect.unwrap(_function_of(fn)), "__globals__", {})
    probe = types.SimpleNamespace(__annotations__={parameter.name: parameter.annotation})
    try:
        return typing.get_type_hints(probe, globalns=namespace, include_extras=True)[parameter.name]
    except Exception as exc:  # NameError, SyntaxError...: any failure to evaluate it
        raise ConfigError(
            f"{what}: the annotation of parameter {parameter.name!r} ({parameter.annotation}) "
            f"does not resolve at run time, so its Depends() cannot be read: {exc} (a name "
            "local to a function, or imported for type checking only? Depends() as the "
            "parameter's default needs no resolving)"
        ) from exc


def _as_dependency(value: object) -> Dependency | None:
    """aioqueue's marker, or FastAPI's (``fastapi.params.Depends`` and its subclasses:
    ``.dependency`` is the provider; provided per job), or None."""
    if isinstance(value, Dependency):
        return value
    if value is _EMPTY or value is None or isinstance(value, str | int | float):
        return None  # (the usual defaults: no class to look at)
    for cls in type(value).__mro__:
        if cls.__name__ == "Depends" and cls.__module__.startswith("fastapi"):
            provider = getattr(value, "dependency", None)
            if not callable(provider):
                raise ConfigError(
                    "a FastAPI Depends() without a function: aioqueue needs it named "
                    "(Depends(provider))"
                )
            return Dependency(provider)
    return None


def _check_positions(
    signature: inspect.Signature, markers: dict[str, Dependency], what: str
) -> None:
    """An injected parameter must be one that no enqueue argument can fill: passed by
    name, after the job's positional parameters."""
    injected_before: str | None = None
    for name, parameter in signature.parameters.items():
        if name in markers:
            if parameter.kind in _VARIADIC:
                raise ConfigError(f"{what}: *{name} or **{name} cannot be injected (Depends)")
            if parameter.kind is _P.POSITIONAL_ONLY:
                raise ConfigError(
                    f"{what}: parameter {name!r} is positional-only, so the job's arguments "
                    "would fill it; an injected parameter (Depends) is passed by name"
                )
            if parameter.kind is _P.POSITIONAL_OR_KEYWORD and injected_before is None:
                injected_before = name
        elif injected_before is not None and parameter.kind in (
            _P.POSITIONAL_OR_KEYWORD,
            _P.VAR_POSITIONAL,
        ):
            raise ConfigError(
                f"{what}: injected parameter {injected_before!r} comes before {name!r}, which "
                f"the job's arguments fill by position: put injected parameters last, or "
                f"after a '*' (keyword-only)"
            )


# -- the plan ------------------------------------------------------------------------------


class _Planner:
    """Builds Provider nodes (one per function and scope) and orders them, depth first:
    a provider comes after every provider it needs."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[Callable[..., Any], Scope], Provider] = {}
        self.steps: list[Provider] = []
        self.worker: list[Provider] = []

    def provider(self, marker: Dependency, path: tuple[Dependency, ...], where: str) -> Provider:
        """The node of ``marker``'s provider; ``path``: the markers that led here."""
        fn, scope, key = marker.provider, marker.scope, marker.key
        name = provider_name(fn)
        try:
            known = self.nodes.get(key)
        except TypeError as exc:  # an unhashable callable object
            raise ConfigError(f"{where}: provider {name} is not hashable: {exc}") from exc
        if known is not None:
            return known
        providers = [each.provider for each in path]
        if fn in providers:
            cycle = [provider_name(each) for each in providers[providers.index(fn) :]]
            raise ConfigError(
                f"{where}: providers that depend on each other in a cycle: "
                f"{' -> '.join((*cycle, name))}"
            )
        needs = self._needs(marker, (*path, marker))
        node = Provider(fn, scope, _kind(fn), needs, name)
        self.nodes[key] = node
        (self.worker if scope == "worker" else self.steps).append(node)
        return node

    def _needs(
        self, marker: Dependency, path: tuple[Dependency, ...]
    ) -> tuple[tuple[str, Provider | None], ...]:
        """What fills each parameter of ``marker``'s provider that needs filling."""
        fn, scope = marker.provider, marker.scope
        where = f"provider {provider_name(fn)}"
        signature = _signature(fn, where)
        markers = _markers(fn, signature, where)
        needs: list[tuple[str, Provider | None]] = []
        for name, parameter in signature.parameters.items():
            given = markers.get(name)
            if given is None and not _is_context(fn, parameter):
                if parameter.default is _EMPTY and parameter.kind not in _VARIADIC:
                    raise ConfigError(
                        f"{where}: its parameter {name!r} is neither Depends(...) nor the "
                        "JobContext (by its annotation), and has no default: nothing can fill it"
                    )
                continue  # left to its default
            if parameter.kind is _P.POSITIONAL_ONLY:
                raise ConfigError(f"{where}: parameter {name!r} must not be positional-only")
            needs.append((name, self._need(given, scope, path, f"{where}, parameter {name!r}")))
        return tuple(needs)

    def _need(
        self, given: Dependency | None, scope: Scope, path: tuple[Dependency, ...], where: str
    ) -> Provider | None:
        """What fills one parameter of a provider of ``scope``: the provider ``given``
        names, or (None) the JobContext."""
        if given is None:
            if scope == "worker":
                raise ConfigError(
                    f"{where}: a worker-scoped provider cannot take the JobContext: it serves "
                    "every job of the worker"
                )
            return None
        need = self.provider(given, path, where)
        if scope == "worker" and need.scope == "job":
            raise ConfigError(
                f"{where}: a worker-scoped provider cannot depend on job-scoped {need.name}: "
                f"declare it Depends({need.name}, scope='worker')"
            )
        return need


def _is_context(fn: Callable[..., Any], parameter: inspect.Parameter) -> bool:
    """Whether the parameter is annotated as the JobContext."""
    annotation = parameter.annotation
    if annotation is JobContext:
        return True
    if not isinstance(annotation, str) or "JobContext" not in annotation:
        return False
    with contextlib.suppress(ConfigError):
        return _resolve(fn, parameter, "") is JobContext
    return False


def _function_of(fn: Callable[..., Any]) -> Any:
    """The function that runs when ``fn`` is called: itself, a partial's, a class's
    ``__init__``, a callable object's ``__call__``."""
    if isinstance(fn, functools.partial):
        return _function_of(fn.func)
    if inspect.isclass(fn):
        return fn.__init__
    return fn if inspect.isroutine(fn) else type(fn).__call__


def _kind(fn: Callable[..., Any]) -> Kind:
    """How to call a provider: by what its function is (a class is called as it is)."""
    call = fn if inspect.isclass(fn) else _function_of(fn)
    if inspect.isasyncgenfunction(call):
        return "agen"
    if inspect.isgeneratorfunction(call):
        return "gen"
    if inspect.iscoroutinefunction(call):
        return "async"
    return "sync"
