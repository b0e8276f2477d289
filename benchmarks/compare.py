"""aioqueue against its peers, on one private Redis server, in one run.

    .venv/bin/python -m benchmarks.compare [--quick] [--systems aioqueue,arq,...]
        [--jobs 20000] [--concurrency 100] [--repeat 1] [--out benchmarks/results]
        [--variants all|default] [--scale] [--processes 2]

Each system has an adapter in ``benchmarks/peers/<system>/`` (the contract:
``benchmarks/peers/CONTRACT.md``), run with that system's own venv,
``benchmarks/.venvs/<system>/``, which this script creates from the folder's
``requirements.txt`` (and re-installs when that file changes). aioqueue is the exception:
its adapter runs with this interpreter (the project's venv), so it measures this checkout.
A system whose folder, venv or ``variants`` call fails is skipped with a message.

For each repeat, each system and each of its variants (``--variants default``: only the
default configuration), on a server emptied (FLUSHALL) before every scenario: enqueue one at
a time, enqueue with gather, bulk enqueue, fill + drain (no-op jobs), drain of jobs sleeping
10 ms, latency, and (unless ``--quick``) the delayed-job scenarios. Each has ``--jobs`` N
jobs, except enqueue one at a time and the drain of sleeping jobs: N/4 (at least 1,000, at
most N); rates and costs per job divide by the scenario's own N. Latency: 200 samples, or
fewer (at least 20) when an adapter's 20-s budget runs out first (results.md says so). A
non-default variant runs only the scenarios its setting changes, as its adapter's
``variants`` answer says (``affects``; fill and drain go together); its other cells show
``=`` (same setting as the default row), the ratio table "—", and the chart no bar.

Around ``fill`` and ``drain`` it reads the server's ``INFO``: commandstats (commands per job,
all of them, the script calls among them, EVALSHA/EVAL/FCALL, and the rest, which includes
the commands the scripts run), CPU (used_cpu_user + used_cpu_sys, µs per job) and memory
(used_memory, less the script cache, after fill minus before: bytes per queued job; after
drain minus before fill: bytes per finished job still kept). Tables show the median of the
repeats.

``--scale`` adds aioqueue's fill + drain of 10,000 and of 1,000,000 jobs (is the cost per
job flat?), ``--processes P`` aioqueue's drain with P worker processes; both as extra rows.
``--quick`` (CI smoke run): 1,000 jobs, one repeat, default variants, no delayed scenarios
(``--delayed`` puts them back).

Writes ``results.json``, ``results.md`` and ``chart.png`` (needs ``pip install -e .[bench]``;
skipped with a message without it) into ``--out``, adapters' stderr into ``--out``/logs.
It always starts its own redis-server (loopback) and never touches one someone else started.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis import Redis

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "peers"
VENVS = ROOT / "benchmarks" / ".venvs"
SYSTEMS = ("aioqueue", "arq", "saq", "streaq", "bullmq", "taskiq-stream", "taskiq-list")
SELF = "aioqueue"
CALL_TIMEOUT = 180.0  # seconds; the contract's limit for one adapter call
INSTALL_TIMEOUT = 900.0
SCRIPT_COMMANDS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})
ENQUEUE_SCENARIOS = ("enqueue_seq", "enqueue_gather", "enqueue_bulk")
FILL_DRAIN = ("fill", "drain")  # one unit: drain runs what fill queued
LATER_SCENARIOS = ("drain_sleep", "latency")
DELAYED_SCENARIOS = ("delayed_sparse", "delayed_burst")
SCENARIOS = (*ENQUEUE_SCENARIOS, *FILL_DRAIN, *LATER_SCENARIOS, *DELAYED_SCENARIOS)
REDUCED = {  # scenarios run with N/4 jobs (at least REDUCED_FLOOR, at most N): what they are
    "enqueue_seq": "enqueue one at a time",
    "drain_sleep": "drain of sleeping jobs",
}
REDUCED_FLOOR = 1_000
LATENCY_SAMPLES = 200  # the adapters' target; fewer when their 20-s budget runs out first
SCALE_SIZES = (10_000, 1_000_000)
HIGHER, LOWER = "higher", "lower"
MAIN_PACKAGES = frozenset(  # the pins results.md names (all of them are in results.json)
    {"arq", "saq", "streaq", "bullmq", "taskiq", "taskiq-redis", "redis", "coredis"}
)


# -- configuration ------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    url: str
    jobs: int
    concurrency: int
    repeat: int
    quick: bool
    delayed: bool
    all_variants: bool
    scale: bool
    processes: int
    out: Path

    @property
    def logs(self) -> Path:
        return self.out / "logs"

    @property
    def scenarios(self) -> tuple[str, ...]:
        """The scenarios of this run (a variant may run fewer)."""
        return tuple(s for s in SCENARIOS if self.delayed or s not in DELAYED_SCENARIOS)

    def jobs_for(self, scenario: str) -> int:
        """N for ``scenario``: ``jobs``, or a quarter of it for the REDUCED scenarios."""
        if scenario in REDUCED:
            return min(self.jobs, max(REDUCED_FLOOR, self.jobs // 4))
        return self.jobs


@dataclass(frozen=True)
class Target:
    """One system in one of its configurations (variants), with the interpreter to use.

    ``affects``: the scenarios the variant's setting changes (the adapter's ``variants``
    call says; None: all of them); the others are not run for it.
    """

    system: str
    variant: str
    python: str
    affects: frozenset[str] | None = None

    def runs(self, scenario: str) -> bool:
        """Whether ``scenario`` is run for this target (fill and drain go together)."""
        if self.affects is None:
            return True
        unit = FILL_DRAIN if scenario in FILL_DRAIN else (scenario,)
        return not self.affects.isdisjoint(unit)

    @property
    def name(self) -> str:
        return self.system if self.variant == "default" else f"{self.system}:{self.variant}"

    @property
    def queue(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "_", f"bench_{self.name}")

    @property
    def adapter(self) -> Path:
        return PEERS / self.system / "adapter.py"


class Skip(Exception):
    """A system left out of this run (the message says why)."""


class AdapterFailed(Exception):
    """An adapter call that did not produce a result."""


# -- venvs and adapters -------------------------------------------------------------------


def interpreter(system: str, logs: Path) -> str:
    """The Python to run the system's adapter with: its venv's, created or updated here."""
    folder = PEERS / system
    if not (folder / "adapter.py").is_file():
        raise Skip(f"no adapter ({folder.relative_to(ROOT)}/adapter.py)")
    if system == SELF:
        return sys.executable
    requirements = folder / "requirements.txt"
    if not requirements.is_file():
        raise Skip(f"no {requirements.relative_to(ROOT)}")
    venv = VENVS / system
    python, stamp = venv / "bin" / "python", venv / ".compare-requirements"
    wanted = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return str(python)
    log = logs / f"{system}-install.log"
    print(f"{system}: installing {requirements} into {venv}")
    if not python.exists():
        _install_step([sys.executable, "-m", "venv", str(venv)], folder, log)
    _install_step([str(python), "-m", "pip", "install", "-q", "-r", requirements.name], folder, log)
    stamp.write_text(wanted)
    return str(python)


def _install_step(argv: list[str], cwd: Path, log: Path) -> None:
    with log.open("ab") as sink:
        try:
            done = subprocess.run(
                argv, cwd=cwd, stdout=sink, stderr=sink, timeout=INSTALL_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise Skip(f"venv setup timed out: {' '.join(argv[:4])} (log: {log})") from exc
    if done.returncode != 0:
        raise Skip(f"venv setup failed: {' '.join(argv[:4])} exited {done.returncode} (log: {log})")


def call(
    target: Target,
    scenario: str,
    config: Config,
    *,
    jobs: int | None = None,
    extra: Sequence[str] = (),
    timeout: float = CALL_TIMEOUT,
) -> dict[str, Any]:
    """Run one adapter call; its JSON line (which may say ``unsupported``)."""
    argv = [
        target.python,
        str(target.adapter),
        scenario,
        "--redis-url",
        config.url,
        "--queue",
        target.queue,
        "--jobs",
        str(jobs or config.jobs),
        "--concurrency",
        str(config.concurrency),
        "--variant",
        target.variant,
        *extra,
    ]
    process = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        out, err = process.communicate()
        _log(config, target, scenario, err)
        raise AdapterFailed(f"killed after {timeout:.0f}s") from None
    _kill_group(process.pid)  # anything the adapter left running
    _log(config, target, scenario, err)
    result = _last_json_line(out)
    if process.returncode != 0 or result is None or "error" in result:
        reason = (result or {}).get("error") or _tail(err) or "no output"
        raise AdapterFailed(f"exit {process.returncode}: {reason}")
    return result


def _kill_group(pgid: int) -> None:
    """SIGKILL the adapter's process group: only processes this script started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _last_json_line(out: bytes) -> dict[str, Any] | None:
    for line in reversed(out.decode(errors="replace").splitlines()):
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            if isinstance(parsed, dict):
                return parsed
    return None


def _tail(err: bytes, lines: int = 3) -> str:
    return " | ".join(err.decode(errors="replace").strip().splitlines()[-lines:])


def _log(config: Config, target: Target, scenario: str, err: bytes) -> None:
    with (config.logs / f"{target.system}.log").open("ab") as sink:
        sink.write(f"\n=== {target.name} {scenario} {datetime.now(UTC):%H:%M:%S}\n".encode())
        sink.write(err)


def attempt(
    target: Target, scenario: str, config: Config, *, jobs: int | None = None, **options: Any
) -> dict[str, Any]:
    """``call`` that records a failure as ``{"error": why}`` instead of raising; a result of
    a scenario with N jobs also records that N (``jobs``: rates and costs per job use it)."""
    jobs = jobs or config.jobs_for(scenario)
    started = time.monotonic()
    try:
        result = call(target, scenario, config, jobs=jobs, **options)
    except AdapterFailed as exc:
        result = {"error": str(exc)}
    print(
        f"  {target.name:<22} {scenario:<15} {_brief(result)}  ({time.monotonic() - started:.1f}s)"
    )
    if _ok(result) and scenario in RATES:
        result["jobs"] = jobs
    return result


def _brief(result: dict[str, Any]) -> str:
    if "unsupported" in result:
        return f"unsupported: {result['unsupported']}"
    if "error" in result:
        return f"FAILED: {result['error'][:300]}"
    parts = [f"{k}={v:.4g}" for k, v in result.items() if isinstance(v, int | float)]
    return ", ".join(parts)


def discover(systems: Sequence[str], config: Config) -> tuple[list[Target], dict[str, str]]:
    """The targets to run (each system's variants), and the systems skipped, with why."""
    targets: list[Target] = []
    skipped: dict[str, str] = {}
    for system in systems:
        try:
            python = interpreter(system, config.logs)
            listed = call(Target(system, "default", python), "variants", config)
            variants = [str(v) for v in listed.get("variants") or ["default"]]
        except (Skip, AdapterFailed, OSError) as exc:
            skipped[system] = str(exc)
            print(f"{system}: SKIPPED: {exc}")
            continue
        if not config.all_variants:
            variants = [v for v in variants if v == "default"] or variants[:1]
        affects = listed.get("affects") or {}
        for variant in variants:
            only = None
            if variant != "default" and variant in affects:
                only = frozenset(str(s) for s in affects[variant])
                if unknown := sorted(only - set(SCENARIOS)):
                    print(f"{system}:{variant}: ignoring unknown scenarios in affects: {unknown}")
                print(f"{system}:{variant}: only {', '.join(sorted(only & set(SCENARIOS)))}")
            target = Target(system, variant, python, only)
            if any(map(target.runs, config.scenarios)):
                targets.append(target)
            else:
                print(f"{target.name}: left out: it changes none of this run's scenarios")
    return targets, skipped


# -- Redis-side measurements ----------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    calls: Counter[str]
    cpu: float  # seconds
    memory: int  # bytes, less the script cache


def snapshot(redis: Redis) -> Snapshot:
    """One ``INFO all``: it is itself counted in the next snapshot's commandstats."""
    info = redis.info("all")
    calls = Counter(
        {
            k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in info.items()
            if k.startswith("cmdstat_")
        }
    )
    cpu = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    memory = int(info["used_memory"]) - int(info.get("used_memory_scripts", 0))
    return Snapshot(calls, cpu, memory)


def cost(before: Snapshot, after: Snapshot, jobs: int, memory_from: Snapshot) -> dict[str, Any]:
    """Per job between two snapshots; memory relative to ``memory_from``."""
    calls = after.calls - before.calls
    calls["info"] -= 1  # the snapshot that opened the interval
    calls = +calls  # drop counts that are zero (or below)
    total = sum(calls.values())
    scripts = sum(count for name, count in calls.items() if name in SCRIPT_COMMANDS)
    return {
        "commands_per_job": total / jobs,
        "script_calls_per_job": scripts / jobs,
        "other_commands_per_job": (total - scripts) / jobs,
        "redis_cpu_us_per_job": (after.cpu - before.cpu) * 1e6 / jobs,
        "memory_per_job": (after.memory - memory_from.memory) / jobs,
        "commands": dict(calls.most_common()),
    }


def fill_and_drain(
    target: Target, config: Config, redis: Redis, *, jobs: int, extra: Sequence[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``fill`` then ``drain`` (same queue), each with its Redis-side cost."""
    timeout = max(CALL_TIMEOUT, jobs / 2_000 + 60)  # 1,000,000 jobs (--scale) take longer
    empty = snapshot(redis)
    filled = attempt(target, "fill", config, jobs=jobs, timeout=timeout)
    full = snapshot(redis)
    if not _ok(filled):
        return filled, {"error": "not run: fill failed"}
    filled["redis"] = cost(empty, full, jobs, empty)
    drained = attempt(target, "drain", config, jobs=jobs, extra=extra, timeout=timeout)
    if _ok(drained):
        drained["redis"] = cost(full, snapshot(redis), jobs, empty)
    return filled, drained


def _ok(result: dict[str, Any]) -> bool:
    return "error" not in result and "unsupported" not in result


def run_target(target: Target, config: Config, redis: Redis) -> dict[str, dict[str, Any]]:
    """Every scenario the target runs, once; raw results by scenario."""
    raw: dict[str, dict[str, Any]] = {}
    for scenario in filter(target.runs, ENQUEUE_SCENARIOS):
        redis.flushall()
        raw[scenario] = attempt(target, scenario, config)
    if target.runs("fill"):
        redis.flushall()
        raw["fill"], raw["drain"] = fill_and_drain(target, config, redis, jobs=config.jobs)
    for scenario in filter(target.runs, LATER_SCENARIOS):
        redis.flushall()
        raw[scenario] = attempt(target, scenario, config)
    for scenario in filter(target.runs, DELAYED_SCENARIOS if config.delayed else ()):
        redis.flushall()
        raw[scenario] = attempt(target, scenario, config)
    redis.flushall()
    return raw


# -- metrics -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One figure: from ``scenario``'s result, ``field`` (a dotted path), as ``kind``:
    rate (jobs / value), rate_after_fill (jobs / (fill's seconds + value)), us (value *
    1e6 / jobs) or value."""

    key: str
    label: str
    unit: str
    better: str | None  # HIGHER, LOWER, or None (shown, not compared)
    scenario: str
    field: str
    kind: str = "value"


RATES = {  # scenario: label; jobs/s = N (the scenario's own) / the adapter's seconds
    "enqueue_seq": "enqueue, one await at a time",
    "enqueue_gather": "enqueue, gather 500 at a time",
    "enqueue_bulk": "enqueue, bulk API",
    "fill": "fill (fastest enqueue, no worker)",
    "drain": "drain no-op jobs, 1 worker process",
    "drain_sleep": "drain jobs sleeping 10 ms",
}
COSTS = {  # key suffix: (label, unit, field of the Redis-side cost, compared in ratios?)
    "commands": ("Redis commands per job, all", "", "commands_per_job", True),
    "scripts": ("of which script calls (EVALSHA/EVAL/FCALL)", "", "script_calls_per_job", False),
    "other": (
        "of which other commands (incl. inside scripts)",
        "",
        "other_commands_per_job",
        False,
    ),
    "redis_cpu": ("Redis CPU per job", "µs", "redis_cpu_us_per_job", True),
}
LATENESS = {"delayed_sparse": "100 over 1 s", "delayed_burst": "1,000 over 0.5 s"}


def _rate(scenario: str) -> Metric:
    return Metric(scenario, RATES[scenario], "jobs/s", HIGHER, scenario, "seconds", "rate")


def _costs(scenario: str) -> Iterator[Metric]:
    for suffix, (text, unit, name, compared) in COSTS.items():
        key, path = f"{scenario}_{suffix}", f"redis.{name}"
        yield Metric(key, f"{scenario}: {text}", unit, LOWER if compared else None, scenario, path)


def _worker_cpu(scenario: str) -> Metric:
    text = f"{scenario.replace('_', ' ')}: worker process CPU per job"
    return Metric(f"{scenario}_worker_cpu", text, "µs", LOWER, scenario, "worker_cpu_seconds", "us")


def _metrics() -> Iterator[Metric]:
    """In table order: enqueue, fill and its cost, drain and its cost, latencies."""
    yield from (_rate(scenario) for scenario in ("enqueue_seq", "enqueue_gather", "enqueue_bulk"))
    yield _rate("fill")
    yield from _costs("fill")
    queued, kept = "Redis memory per queued job", "Redis memory per job still kept after drain"
    yield Metric("memory", queued, "B", LOWER, "fill", "redis.memory_per_job")
    yield _rate("drain")
    yield Metric(
        "end_to_end", "fill + drain, from the first enqueue (worker start-up included)",
        "jobs/s", HIGHER, "drain", "seconds", "rate_after_fill",
    )  # fmt: skip
    yield _worker_cpu("drain")
    yield from _costs("drain")
    yield Metric("kept", kept, "B", None, "drain", "redis.memory_per_job")
    yield _rate("drain_sleep")
    yield _worker_cpu("drain_sleep")
    for q in ("p50", "p99"):
        text = f"latency, enqueue → start, {q}"
        yield Metric(f"latency_{q}", text, "ms", LOWER, "latency", f"{q}_ms")
    for scenario, what in LATENESS.items():
        for q in ("p50", "p99", "max"):
            text = f"delayed {what}: lateness {q}"
            yield Metric(f"{scenario}_{q}", text, "ms", LOWER, scenario, f"{q}_ms")


METRICS: tuple[Metric, ...] = tuple(_metrics())
EXTRA_METRICS = (  # the columns of the extra rows
    Metric("fill", "fill", "jobs/s", HIGHER, "fill", "seconds", "rate"),
    Metric("memory", "memory per queued job", "B", LOWER, "fill", "redis.memory_per_job"),
    Metric("drain", "drain", "jobs/s", HIGHER, "drain", "seconds", "rate"),
    Metric(
        "drain_warm", "drain, from worker ready", "jobs/s", HIGHER, "drain",
        "seconds-startup_seconds", "rate",
    ),
    Metric("drain_cpu", "worker CPU per job", "µs", LOWER, "drain", "worker_cpu_seconds", "us"),
    Metric(
        "drain_run_cpu", "worker CPU per job, from ready", "µs", LOWER, "drain",
        "worker_run_cpu_seconds", "us",
    ),
    Metric("commands", "Redis commands per job", "", LOWER, "drain", "redis.commands_per_job"),
    Metric("scripts", "script calls per job", "", LOWER, "drain", "redis.script_calls_per_job"),
    Metric("redis_cpu", "Redis CPU per job", "µs", LOWER, "drain", "redis.redis_cpu_us_per_job"),
)  # fmt: skip


def extract(metric: Metric, raw: dict[str, dict[str, Any]]) -> float | str | None:
    """The metric's value in one run; or a status string (unsupported, error); or None.
    Per-job figures divide by the scenario's own N, which ``attempt`` recorded as ``jobs``."""
    result = raw.get(metric.scenario)
    if result is None:
        return None
    if "unsupported" in result:
        return f"unsupported: {result['unsupported']}"
    if "error" in result:
        return f"error: {result['error']}"
    value = _field(result, metric.field)
    if value is None:
        return None
    jobs = float(result.get("jobs") or 0)
    if metric.kind in {"rate", "us", "rate_after_fill"} and not jobs:
        return None
    if metric.kind == "rate_after_fill":  # the drain ran what fill queued: N jobs, both
        fill = _field(raw.get("fill") or {}, "seconds")
        return jobs / (fill + value) if fill is not None and fill + value > 0 else None
    if metric.kind == "rate":
        return jobs / value if value > 0 else None
    if metric.kind == "us":
        return value * 1e6 / jobs
    return value


def _field(result: dict[str, Any], path: str) -> float | None:
    if "-" in path:  # "a-b": a difference of two fields
        first, second = (_field(result, part) for part in path.split("-", 1))
        return None if first is None or second is None else first - second
    value: Any = result
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) else None


def summarise(
    runs: Sequence[dict[str, dict[str, Any]]], metrics: Sequence[Metric]
) -> tuple[dict[str, float], dict[str, str]]:
    """Medians over the runs that have a value; a status for metrics none of them has."""
    medians: dict[str, float] = {}
    status: dict[str, str] = {}
    for metric in metrics:
        values = [extract(metric, raw) for raw in runs]
        numbers = [v for v in values if isinstance(v, float | int)]
        if numbers:
            medians[metric.key] = float(statistics.median(numbers))
        elif texts := [v for v in values if isinstance(v, str)]:
            status[metric.key] = texts[0]
    return medians, status


# -- extras: aioqueue at scale, with several processes ---------------------------------------


@dataclass
class Extra:
    label: str
    jobs: int
    processes: int
    runs: list[dict[str, dict[str, Any]]] = field(default_factory=list)


def run_extras(target: Target, config: Config, redis: Redis) -> list[Extra]:
    extras = []
    if config.scale:
        extras += [Extra(f"{size:,} queued, 1 worker process", size, 1) for size in SCALE_SIZES]
    if config.processes > 1:
        text = f"{config.jobs:,} queued, {config.processes} worker processes"
        extras.append(Extra(text, config.jobs, config.processes))
    for extra in extras:
        print(f"{SELF} extra: {extra.label}")
        for _ in range(config.repeat):
            redis.flushall()
            options = ["--processes", str(extra.processes)] if extra.processes > 1 else []
            filled, drained = fill_and_drain(target, config, redis, jobs=extra.jobs, extra=options)
            extra.runs.append({"fill": filled, "drain": drained})
        redis.flushall()
    return extras


# -- the report ----------------------------------------------------------------------------


@dataclass
class Report:
    meta: dict[str, Any]
    targets: list[Target]
    runs: dict[str, list[dict[str, dict[str, Any]]]]
    skipped: dict[str, str]
    extras: list[Extra]
    medians: dict[str, dict[str, float]] = field(default_factory=dict)
    status: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for target in self.targets:
            medians, status = summarise(self.runs[target.name], METRICS)
            self.medians[target.name], self.status[target.name] = medians, status

    def target(self, name: str) -> Target:
        return next(t for t in self.targets if t.name == name)

    def latency_samples(self, name: str) -> int | None:
        """The fewest latency samples among the target's runs (None: none reported)."""
        counts = [
            int(raw["latency"]["samples"])
            for raw in self.runs[name]
            if isinstance(raw.get("latency", {}).get("samples"), int | float)
        ]
        return min(counts) if counts else None


def fmt(value: float, unit: str) -> str:
    if unit == "jobs/s":
        return f"{value:,.0f}"
    if unit in {"µs", "B"}:
        return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"
    if unit == "ms":
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"


SAME = "="  # absolute table: a scenario not run for a variant whose setting does not change it


def cell(report: Report, name: str, metric: Metric) -> str:
    if metric.key in report.medians[name]:
        return fmt(report.medians[name][metric.key], metric.unit)
    status = report.status[name].get(metric.key)
    if status is not None:
        return "unsupported" if status.startswith("unsupported") else "failed"
    return "—" if report.target(name).runs(metric.scenario) else SAME


def label(metric: Metric) -> str:
    return f"{metric.label} ({metric.unit})" if metric.unit else metric.label


def absolute_table(report: Report) -> Iterator[str]:
    names = [t.name for t in report.targets]
    yield "| metric | " + " | ".join(names) + " |"
    yield "|---|" + "---:|" * len(names)
    for metric in METRICS:
        if all(cell(report, n, metric) in {"—", SAME} for n in names):
            continue
        arrow = {HIGHER: " ↑", LOWER: " ↓"}.get(metric.better or "", "")
        yield (
            f"| {label(metric)}{arrow} | "
            + " | ".join(cell(report, n, metric) for n in names)
            + " |"
        )


def jobs_text(meta: dict[str, Any]) -> str:
    """E.g. 20,000 jobs per scenario (enqueue one at a time and drain of sleeping jobs: 5,000)."""
    text = f"{meta['jobs']:,} jobs per scenario"
    by_count: dict[int, list[str]] = {}
    for scenario, jobs in meta.get("scenario_jobs", {}).items():
        by_count.setdefault(jobs, []).append(REDUCED.get(scenario, scenario))
    if by_count:
        text += " (" + "; ".join(f"{' and '.join(s)}: {n:,}" for n, s in by_count.items()) + ")"
    return text


def table_notes(report: Report) -> Iterator[str]:
    """Lines under the absolute table: what ``=`` means, latencies from fewer samples."""
    notes = []
    names = [t.name for t in report.targets]
    if any(cell(report, n, m) == SAME for n in names for m in METRICS):
        notes.append(
            f"`{SAME}`: not run for this variant, whose setting does not change that scenario "
            "(the adapter says which scenarios each variant affects): the same setting as the "
            "system's default row."
        )
    short = {
        n: count
        for n in names
        if (count := report.latency_samples(n)) is not None and count < LATENCY_SAMPLES
    }
    if short:
        counts = ", ".join(f"{n} ({count})" for n, count in short.items())
        notes.append(
            f"Latency from fewer than {LATENCY_SAMPLES} samples (each adapter samples for at "
            f"most 20 s, at least 20 samples): {counts}."
        )
    for note in notes:
        yield ""
        yield note


def ratio(mine: float, theirs: float | None, better: str | None) -> float | None:
    """aioqueue relative to a peer, > 1 when aioqueue is better."""
    if better is None or theirs is None or mine <= 0 or theirs <= 0:
        return None
    return mine / theirs if better == HIGHER else theirs / mine


def ratio_table(report: Report) -> Iterator[str]:
    peers = [t.name for t in report.targets if t.system != SELF]
    mine = report.medians.get(SELF)
    if mine is None or not peers:
        yield "(needs aioqueue and at least one peer)"
        return
    yield "| metric | " + " | ".join(f"vs {p}" for p in peers) + " |"
    yield "|---|" + "---:|" * len(peers)
    for metric in (m for m in METRICS if m.better and m.key in mine):
        cells = []
        for peer in peers:
            value = ratio(mine[metric.key], report.medians[peer].get(metric.key), metric.better)
            cells.append("—" if value is None else f"{value:,.2f}x")
        if any(c != "—" for c in cells):
            yield f"| {metric.label} | " + " | ".join(cells) + " |"


def extras_table(report: Report) -> Iterator[str]:
    rows: list[tuple[str, list[dict[str, dict[str, Any]]]]] = []
    if SELF in report.runs and report.extras:
        main_row = f"{report.meta['jobs']:,} queued, 1 worker process (main table)"
        rows.append((main_row, report.runs[SELF]))
    rows += [(e.label, e.runs) for e in report.extras]
    yield "| run | " + " | ".join(label(m) for m in EXTRA_METRICS) + " |"
    yield "|---|" + "---:|" * len(EXTRA_METRICS)
    for name, runs in rows:
        medians, status = summarise(runs, EXTRA_METRICS)
        cells = [
            fmt(medians[m.key], m.unit)
            if m.key in medians
            else ("failed" if m.key in status else "—")
            for m in EXTRA_METRICS
        ]
        yield f"| {name} | " + " | ".join(cells) + " |"


def problems(report: Report) -> Iterator[str]:
    for system, why in report.skipped.items():
        yield f"- **{system}** skipped: {why}"
    groups = [(t.name, report.runs[t.name]) for t in report.targets]
    groups += [(f"{SELF} ({extra.label})", extra.runs) for extra in report.extras]
    for name, runs in groups:
        seen = set()
        for raw in runs:
            for scenario, result in raw.items():
                text = result.get("error") or result.get("unsupported")
                if text and (scenario, text) not in seen:
                    seen.add((scenario, text))
                    kind = "unsupported" if "unsupported" in result else "failed"
                    yield f"- {name} `{scenario}` {kind}: {text}"


def markdown(report: Report) -> str:
    meta = report.meta
    lines = [
        "# aioqueue and its peers",
        "",
        f"{meta['date']}; {meta['machine']}; Python {meta['python']}; redis-server "
        f"{meta['redis']}. {jobs_text(meta)}, worker concurrency "
        f"{meta['concurrency']}, median of {meta['repeat']} run(s)"
        f"{'; --quick' if meta['quick'] else ''}.",
        "",
        "Versions: " + "; ".join(f"{k}: {v}" for k, v in meta["versions"].items()),
        "",
        "## Absolute figures (↑ higher is better, ↓ lower is better)",
        "",
        *absolute_table(report),
        *table_notes(report),
        "",
        "## aioqueue relative to each peer",
        "",
        "x > 1: aioqueue is better (rates: aioqueue / peer; costs and latencies: peer / "
        "aioqueue). Rows without an arrow in the table above (a split of the commands, "
        "memory kept) are not compared.",
        "",
        *ratio_table(report),
    ]
    if report.extras:
        lines += [
            "",
            f"## Extra rows ({SELF} only)",
            "",
            "Each row: `fill` then `drain` of that many jobs (concurrency per process as above). "
            "Is the cost per job flat from 10,000 to 1,000,000 queued (`--scale`)? What do more "
            "worker processes give (`--processes`)? (*from worker ready*: without the worker's "
            "interpreter start-up.)",
            "",
            *extras_table(report),
        ]
    if found := list(problems(report)):
        lines += ["", "## Skipped, unsupported, failed", "", *found]
    lines += ["", "## Method", "", *METHOD.strip().splitlines()]
    return "\n".join(lines) + "\n"


METHOD = """
One redis-server (started by `benchmarks.compare` on a loopback port, no persistence) serves
every system in turn; it is emptied (FLUSHALL) before each scenario. Each system runs in its
own venv through its adapter (`benchmarks/peers/<system>/adapter.py`, contract in
`benchmarks/peers/CONTRACT.md`), with its default settings unless the column names a variant;
a variant runs only the scenarios its setting changes (`=` elsewhere). Enqueue one at a time
and the drain of sleeping jobs use N/4 jobs, the rest N (see the top).
Rates are N / the adapter's seconds; drain time runs from starting the worker process to the
last job done, so it includes the worker's start-up, and worker CPU is the whole process's.
Redis-side figures come from INFO around `fill` and `drain`, divided by N: commandstats
(commands run inside scripts are counted too, under their own names), used_cpu_user+sys, and
used_memory less the script cache. The machine is shared by Redis, the adapter and the
worker: absolute figures depend on it, ratios less so.
"""


def chart(report: Report, path: Path) -> str:
    """Grouped bars of jobs/s; a message saying what was written (or why not). A variant
    has bars only for the scenarios run for it (none: not in the chart)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        return "chart skipped: no matplotlib (pip install -e '.[bench]')"
    meta = report.meta
    groups = [
        ("enqueue_seq", "enqueue\none at a time"),
        ("enqueue_gather", "enqueue\ngather 500"),
        ("drain", "drain\nno-op jobs"),
        ("drain_sleep", "drain\njobs sleep 10 ms"),
    ]
    reduced = meta.get("scenario_jobs", {})
    groups = [(key, f"{text}\n({reduced[key]:,} jobs)" if key in reduced else text)
              for key, text in groups]  # fmt: skip
    targets = [t for t in report.targets if any(t.runs(key) for key, _ in groups)]
    colours = plt.get_cmap("tab10" if len(targets) <= 10 else "tab20")
    colour = {t.name: colours(i % colours.N) for i, t in enumerate(targets)}
    members = [[t.name for t in targets if t.runs(key)] for key, _ in groups]
    fig, ax = plt.subplots(figsize=(max(8.0, 1.2 * len(targets) + 6), 5))
    width = 0.8 / max(1, *map(len, members))
    finite = []
    for g, ((key, _), names) in enumerate(zip(groups, members, strict=True)):
        row = [report.medians[n].get(key, math.nan) for n in names]
        xs = [g + (i - (len(names) - 1) / 2) * width for i in range(len(names))]
        bars = ax.bar(xs, row, width, color=[colour[n] for n in names])
        ax.bar_label(bars, labels=[_short(v) for v in row], fontsize=7, rotation=90, padding=2)
        finite += [v for v in row if v > 0]
    if finite and max(finite) / min(finite) > 20:
        ax.set_yscale("log")
    ax.set_xticks(range(len(groups)), [text for _, text in groups])
    ax.set_ylabel("jobs/s")
    ax.set_title(
        f"{meta['jobs']:,} jobs unless noted, concurrency {meta['concurrency']}, "
        f"median of {meta['repeat']}"
    )
    handles = [Patch(color=colour[t.name], label=t.name) for t in targets]
    ax.legend(handles=handles, fontsize=8, ncols=min(4, len(targets)))
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"wrote {path}"


def _short(value: float) -> str:
    if math.isnan(value):
        return ""
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def to_json(report: Report) -> dict[str, Any]:
    extras = []
    for extra in report.extras:
        medians, status = summarise(extra.runs, EXTRA_METRICS)
        extras.append(
            {
                "label": extra.label,
                "jobs": extra.jobs,
                "processes": extra.processes,
                "median": medians,
                "status": status,
                "runs": extra.runs,
            }
        )
    return {
        "meta": report.meta,
        "metrics": [vars(m) for m in METRICS],
        "targets": [
            {
                "name": t.name,
                "system": t.system,
                "variant": t.variant,
                "scenarios": [s for s in SCENARIOS if t.runs(s)],
                "python": t.python,
                "requirements": requirements(t.system),
                "median": report.medians[t.name],
                "status": report.status[t.name],
                "runs": report.runs[t.name],
            }
            for t in report.targets
        ],
        "skipped": report.skipped,
        "extras": extras,
    }


# -- meta ------------------------------------------------------------------------------------


def versions(targets: Sequence[Target]) -> dict[str, str]:
    """aioqueue's version and commit; each peer's pins of itself and its Redis client."""
    found = {SELF: f"{aioqueue.__version__} ({_git_state()})"}
    for system in dict.fromkeys(t.system for t in targets if t.system != SELF):
        pins = requirements(system)
        main = [pin for pin in pins if _package(pin) in MAIN_PACKAGES]
        found[system] = ", ".join(main or pins)
    return found


def requirements(system: str) -> list[str]:
    """The lines of the system's requirements.txt, without comments."""
    text = (PEERS / system / "requirements.txt").read_text()
    return [line.split("#")[0].strip() for line in text.splitlines() if line.split("#")[0].strip()]


def _package(pin: str) -> str:
    name = re.split(r"[\[<>=!~; ]", pin, maxsplit=1)[0]
    return name.lower().replace("_", "-")


def _git_state() -> str:
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return f"commit {head}{' + local changes' if dirty else ''}"


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def machine() -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="1,000 jobs, 1 run, no delayed scenarios"
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--jobs", type=int, help="jobs per scenario (20,000; --quick 1,000)")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument(
        "--repeat", type=int, help="runs per target; tables show medians (default 1)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--variants", choices=["all", "default"], help="(all; --quick default)")
    parser.add_argument(
        "--delayed",
        action=argparse.BooleanOptionalAction,
        help="delayed scenarios (on; --quick off)",
    )
    parser.add_argument(
        "--scale", action="store_true", help="aioqueue: drain 10,000 vs 1,000,000 queued"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="aioqueue: also drain with this many worker processes",
    )
    return parser.parse_args(argv)


def make_config(args: argparse.Namespace, url: str) -> Config:
    quick = bool(args.quick)
    out = args.out if args.out.is_absolute() else Path.cwd() / args.out
    return Config(
        url=url,
        jobs=args.jobs or (1_000 if quick else 20_000),
        concurrency=args.concurrency,
        repeat=args.repeat or 1,
        quick=quick,
        delayed=args.delayed if args.delayed is not None else not quick,
        all_variants=(args.variants or ("default" if quick else "all")) == "all",
        scale=args.scale,
        processes=args.processes,
        out=out,
    )


def measure(config: Config, systems: Sequence[str]) -> Report:
    """Everything, on the server at ``config.url``."""
    redis = Redis.from_url(config.url)
    # FLUSHALL frees in the foreground (Valkey 8 defaults to background freeing, which
    # would run during the next scenario: after 1,000,000 jobs, for seconds).
    redis.config_set("lazyfree-lazy-user-flush", "no")
    targets, skipped = discover(systems, config)
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {t.name: [] for t in targets}
    for r in range(config.repeat):
        for target in targets:
            print(f"[run {r + 1}/{config.repeat}] {target.name}")
            redis.flushall()  # between systems: nothing of the last one remains
            runs[target.name].append(run_target(target, config, redis))
    own = next((t for t in targets if t.system == SELF), None)
    if own is None and (config.scale or config.processes > 1):
        own = Target(SELF, "default", interpreter(SELF, config.logs))
    extras = run_extras(own, config, redis) if own else []
    info = redis.info("server")
    redis.close()
    meta = {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "machine": machine(),
        "python": platform.python_version(),
        "redis": info["redis_version"],
        "jobs": config.jobs,
        "scenario_jobs": {s: n for s in REDUCED if (n := config.jobs_for(s)) != config.jobs},
        "concurrency": config.concurrency,
        "repeat": config.repeat,
        "quick": config.quick,
        "delayed": config.delayed,
        "systems": list(systems),
        "versions": versions(targets),
    }
    return Report(meta, targets, runs, skipped, extras)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := [s for s in systems if s not in SYSTEMS]:
        print(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}", file=sys.stderr)
        return 2
    started = time.monotonic()
    with EmbeddedServer() as server:
        config = make_config(args, server.url)
        config.logs.mkdir(parents=True, exist_ok=True)
        print(f"redis-server {server.binary} at {server.url}; results to {config.out}")
        report = measure(config, systems)
    text = markdown(report)
    (config.out / "results.json").write_text(json.dumps(to_json(report), indent=1) + "\n")
    (config.out / "results.md").write_text(text)
    print("\n" + text)
    print(chart(report, config.out / "chart.png"))
    print(
        f"wrote {config.out / 'results.md'} and results.json in {time.monotonic() - started:.0f}s"
    )
    return 0 if report.targets else 1


if __name__ == "__main__":
    sys.exit(main())
