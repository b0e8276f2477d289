"""Every Redis key aioqueue uses, named in one place.

Layout: ``<prefix>:{<queue>}:<role>[:<part>]``. The braces are a Redis Cluster hash
tag, so every key of one queue lives in one slot and every script touches one slot.

Roles:
  ready:<p>   LIST  job ids waiting to run, one list per priority level (0..9)
  notify      LIST  one token per ready job; idle workers BLPOP it
  skipped     HASH  priority -> how many entries of its ready list belong to cancelled jobs
              (take skips them): the true ready count of a level is its list's length
              less this (a level with none has no field)
  wake:<l>:<w> LIST a private wake-up list of one blocking loop (l) of worker w: a token
              ends its BLPOP at once (shutdown) without cancelling a redis-py call
  take:<l>    LIST  ids one take call leased (so a resent take returns the same jobs)
  idle        ZSET  "<lease_ms> <token>" -> until when (ms): offers of consumers waiting
              with nothing to do; enqueue.lua hands such a consumer a new job (idle.lua)
  direct:<t>  LIST  the job handed under offer t (leased to t, its id also in take:<t>),
              for its consumer's BLPOP
  schedule    ZSET  job id -> due time (ms, Redis clock; a fraction of a ms keeps ties FIFO)
  schedule:wake LIST at most one token; wakes a poller when an earlier job is scheduled
  active      ZSET  job id -> lease deadline (ms, Redis clock)
  dead        ZSET  job id -> time it was buried (ms)
  completed   ZSET  job id -> time it finished (ms): the newest 1,000 complete jobs that keep
              a record (a result), for the listings (ack.lua)
  paused      STRING set while the queue is paused: take.lua leases nothing
  limits      HASH  flow control: c (most jobs leased at once), i (ms between starts), b (burst)
  rate        STRING the rate limit's theoretical arrival time (µs), kept by take.lua
  tenants     ZSET  the tenants with queued jobs (scored at least their count, tenants:count);
              and the prefix of its fair keys, ``tenants:`` count, ready, ring:<p>, jobs:<p>:<t>,
              turn, running, held, due, rate:<t>, weights, limits (``tenant_key``; fair.lua)
  debounce    HASH  debounce key -> id of its latest run (debounce.lua)
  groups      HASH  group -> id of the job that holds it: the one job of the group that is
              queued, scheduled or running (lua/include/links.lua)
  group:<g>   LIST  ids of the jobs waiting behind group g, in enqueue order
  inputs:<id> HASH  a workflow parent's children that finished: their index -> "c" (complete)
              or "f" (failed), followed by the result or error JSON if the parent keeps them
  handoff     ZSET  outcomes of this queue's jobs for parents on other queues, waiting to
              be delivered there (a worker's HandOff: deliver.lua, then ZREM)
  waiting     STRING how many jobs wait behind their group or for their children
  job:<id>    HASH  the job record (fields: see records.py)
  donefp:<w>:<g>:<s> SET completed jobs that returned nothing, by fingerprint (a 63-bit
              integer: ids.fingerprint): no record each (a key costs ~190 B however small)
              but a member of one of ids.DONE_SLOTS small sets (intsets: 8 B a member) per
              generation g of the idempotency window w (ms); s = done_slot(id). Producers
              and workers find these only if they agree on w. (``done:``, hashes of whole
              ids, is what an earlier version kept: still looked in for one window)
  seq         STRING counter for ids that scripts mint (poison entries)
  periodic    HASH  periodic spec name -> spec (JSON)
  workers     SET   ids of workers that beat for this queue
  worker:<w>  STRING a worker's heartbeat (JSON), expiring after three missed beats
  periodic:ticks HASH periodic spec name -> last tick enqueued (ms)
  history:<h> HASH  outcome counts of hour h (epoch ms // 3600000): field
              "<minute of the hour>:<code>" -> n (lua/include/history.lua)
  settled     pub/sub channel (not a key): ids of jobs that just finished, as netstrings
  aborts      pub/sub channel (not a key): ids of running jobs to abort
  aborts:<w>  pub/sub channel: a message ends worker w's abort listener's wait (shutdown)

The fields of a job record are listed in ``records.py``.

Messaging (``messaging.py``) has keys of its own, one hash tag per mailbox or group
(``{mailbox:<name>}``, ``{group:<name>}``: queue names have no colon, so none collide):
  seq         STRING message counter: ids are 1, 2, 3, ... with no gaps
  log         STREAM one entry per message, stream id "<id>-0"; fields s (sender), t (sent,
              epoch ms by the Redis clock), b (JSON body)
  cursors     ZSET  reader -> the last id it acknowledged (a mailbox has one reader, "")
  dropped     STRING messages trimmed by the length bound before every reader had them
  posted      pub/sub channel (not a key): "1:*" after each post wakes waiting fetches
and one per member: ``{member:<name>}:groups`` SET, the groups it has joined, and one per
prefix: ``<prefix>:channels`` SET of "mailbox:<name>" and "group:<name>" (for ``info``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import ConfigError

TenantRole = Literal[
    "count", "ready", "ring", "jobs", "turn", "running", "held", "due", "rate", "weights", "limits"
]

PRIORITY_LEVELS = 10
"""Priorities are 0..9; a higher number runs first."""

_FORBIDDEN = frozenset("{}: \t\r\n")


def validate_name(kind: str, name: str) -> str:
    """Reject names that would break the key layout (hash tags, separators)."""
    if not name or set(name) & _FORBIDDEN or len(name) > 200:
        raise ConfigError(
            f"invalid {kind} name {name!r}: use 1-200 characters without braces, colons or spaces"
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Every Redis key of one queue. All carry the hash tag ``{queue}``,
    so any script over one queue runs in a single Cluster slot."""

    name: str
    base: str  # "<prefix>:{<queue>}"

    @classmethod
    def for_queue(cls, prefix: str, queue: str) -> QueueKeys:
        validate_name("queue", queue)
        if not prefix or set(prefix) & set("{} \t\r\n"):
            raise ConfigError(f"invalid key prefix {prefix!r}")
        return cls(queue, f"{prefix}:{{{queue}}}")

    @property
    def notify(self) -> str:
        return f"{self.base}:notify"

    @property
    def skipped(self) -> str:
        return f"{self.base}:skipped"

    @property
    def schedule(self) -> str:
        return f"{self.base}:schedule"

    @property
    def schedule_wake(self) -> str:
        return f"{self.base}:schedule:wake"

    @property
    def active(self) -> str:
        return f"{self.base}:active"

    @property
    def dead(self) -> str:
        return f"{self.base}:dead"

    @property
    def periodic(self) -> str:
        return f"{self.base}:periodic"

    @property
    def ticks(self) -> str:
        return f"{self.base}:periodic:ticks"

    @property
    def paused(self) -> str:
        """STRING set while the queue is paused (take.lua takes nothing)."""
        return f"{self.base}:paused"

    @property
    def limits(self) -> str:
        """HASH of the queue's limits (concurrency, rate), obeyed by take.lua."""
        return f"{self.base}:limits"

    @property
    def debounce(self) -> str:
        """HASH: debounce key -> the id of its latest run (``.options(debounce=...)``)."""
        return f"{self.base}:debounce"

    @property
    def groups(self) -> str:
        """HASH: group -> id of the job that holds it (``.options(group=...)``)."""
        return f"{self.base}:groups"

    @property
    def group_prefix(self) -> str:
        """Scripts append a group name to this to reach the group's waiting list."""
        return f"{self.base}:group:"

    def group(self, name: str) -> str:
        return f"{self.base}:group:{name}"

    @property
    def inputs_prefix(self) -> str:
        """Scripts append a parent's id to this to reach its children's outcomes."""
        return f"{self.base}:inputs:"

    def inputs(self, parent_id: str) -> str:
        return f"{self.base}:inputs:{parent_id}"

    @property
    def handoff(self) -> str:
        """ZSET of outcomes waiting to be delivered to parents on other queues."""
        return f"{self.base}:handoff"

    @property
    def waiting(self) -> str:
        """STRING: how many jobs are waiting (behind their group, or for their children)."""
        return f"{self.base}:waiting"

    def links(self) -> list[str]:
        """The keys of include/links.lua, in the order the scripts declare them."""
        return [self.groups, self.group_prefix, self.inputs_prefix, self.handoff, self.waiting]

    @property
    def completed(self) -> str:
        """ZSET: job id -> finished (ms), the newest complete jobs that keep a record."""
        return f"{self.base}:completed"

    @property
    def rate(self) -> str:
        """STRING: the rate limit's theoretical arrival time (take.lua's GCRA)."""
        return f"{self.base}:rate"

    @property
    def tenants(self) -> str:
        """ZSET: the tenants with queued jobs (scored at least their count); the prefix of
        the fair keys (``tenant_key``)."""
        return f"{self.base}:tenants"

    def tenant_key(self, role: TenantRole, *parts: int | str) -> str:
        """A key of the queue's tenants, as lua/include/fair.lua names it:
        ``tenant_key("running")``, ``tenant_key("ring", 5)``, ``tenant_key("jobs", 5, t)``."""
        return ":".join((self.tenants, role, *map(str, parts)))

    @property
    def abort_channel(self) -> str:
        """Pub/sub channel (not a key) on which cancel announces aborts of running jobs."""
        return f"{self.base}:aborts"

    @property
    def settled_channel(self) -> str:
        """Pub/sub channel (not a key) on which scripts announce jobs that finished."""
        return f"{self.base}:settled"

    @property
    def history_prefix(self) -> str:
        """Scripts append an hour number to this to reach that hour's history hash."""
        return f"{self.base}:history:"

    def history(self, hour: int) -> str:
        return f"{self.base}:history:{hour}"

    def abort_wake(self, worker_id: str) -> str:
        """Pub/sub channel on which a worker wakes its own abort listener (shutdown)."""
        return f"{self.abort_channel}:{worker_id}"

    @property
    def seq(self) -> str:
        return f"{self.base}:seq"

    @property
    def done_prefix(self) -> str:
        """Scripts append ``<window>:<generation>:<slot>`` to this to reach a done set."""
        return f"{self.base}:donefp:"

    def done(self, window_ms: int, generation: int, slot: int) -> str:
        return f"{self.base}:donefp:{window_ms}:{generation}:{slot}"

    @property
    def job_prefix(self) -> str:
        """Scripts append a job id to this to reach a job record in the same slot."""
        return f"{self.base}:job:"

    def job(self, job_id: str) -> str:
        return f"{self.base}:job:{job_id}"

    def ready(self, priority: int) -> str:
        return f"{self.ready_prefix}{priority}"

    def ready_lists(self) -> list[str]:
        """Ready lists of priorities 0..9, in that order (scripts index them by priority)."""
        return [self.ready(p) for p in range(PRIORITY_LEVELS)]

    @property
    def workers(self) -> str:
        return f"{self.base}:workers"

    def worker(self, worker_id: str) -> str:
        return f"{self.base}:worker:{worker_id}"

    @property
    def idle(self) -> str:
        """ZSET: the offers of consumers waiting with nothing to do (idle.lua)."""
        return f"{self.base}:idle"

    @property
    def direct_prefix(self) -> str:
        """Scripts append an offer's token to this to reach the jobs handed under it."""
        return f"{self.base}:direct:"

    def direct(self, token: str) -> str:
        return f"{self.base}:direct:{token}"

    @property
    def ready_prefix(self) -> str:
        """Scripts append a priority to this to reach that ready list."""
        return f"{self.base}:ready:"

    @property
    def taken_prefix(self) -> str:
        """Scripts append a lease token to this to reach that take's list."""
        return f"{self.base}:take:"

    def taken(self, lease: str) -> str:
        return f"{self.base}:take:{lease}"

    def wake(self, worker_id: str, listener: str = "take") -> str:
        """The wake-up list of one blocking loop of one worker ("take", "schedule")."""
        return f"{self.base}:wake:{listener}:{worker_id}"


@dataclass(frozen=True, slots=True)
class ChannelKeys:
    """The keys of one mailbox or group, all in one Cluster slot."""

    kind: str  # "mailbox" or "group"
    name: str
    base: str  # "<prefix>:{<kind>:<name>}"

    @classmethod
    def of(cls, prefix: str, kind: str, name: str) -> ChannelKeys:
        validate_name(kind, name)
        return cls(kind, name, f"{prefix}:{{{kind}:{name}}}")

    @property
    def seq(self) -> str:
        return f"{self.base}:seq"

    @property
    def log(self) -> str:
        return f"{self.base}:log"

    @property
    def cursors(self) -> str:
        return f"{self.base}:cursors"

    @property
    def posted_channel(self) -> str:
        """Pub/sub channel (not a key) on which each post wakes the fetches that wait."""
        return f"{self.base}:posted"

    @property
    def dropped(self) -> str:
        return f"{self.base}:dropped"


@dataclass(frozen=True, slots=True)
class TopicKeys:
    """The keys of one topic, all in one Cluster slot: its log (a stream whose consumer
    groups are the subscriber groups), their dead letters, and their delayed retries."""

    name: str
    base: str  # "<prefix>:{topic:<name>}"
    registry: str  # the prefix's list of channels (``channels_registry``): "topic:<name>"

    @classmethod
    def of(cls, prefix: str, name: str) -> TopicKeys:
        validate_name("topic", name)
        return cls(name, f"{prefix}:{{topic:{name}}}", channels_registry(prefix))

    @property
    def log(self) -> str:
        return f"{self.base}:log"

    @property
    def dead(self) -> str:
        return f"{self.base}:dead"

    @property
    def retry(self) -> str:
        """HASH "<group> <message id>" -> when its next attempt is due (epoch ms)."""
        return f"{self.base}:retry"

    @property
    def dropped(self) -> str:
        return f"{self.base}:dropped"

    @property
    def processed_channel(self) -> str:
        """Pub/sub channel (not a key) on which acks wake ``wait_processed``."""
        return f"{self.base}:processed"

    def wake(self, group: str, consumer: str) -> str:
        """STREAM: one subscriber group's consumer's own wake stream (in the log's slot),
        whose entry ends its blocking XREADGROUP at once (shutdown)."""
        return f"{self.base}:wake:{group}:{consumer}"


def member_groups(prefix: str, member: str) -> str:
    """The SET of groups ``member`` has joined (in the member's own slot)."""
    validate_name("member", member)
    return f"{prefix}:{{member:{member}}}:groups"


def channels_registry(prefix: str) -> str:
    """The SET of every mailbox ("mailbox:<name>"), group ("group:<name>") and topic
    ("topic:<name>") in use."""
    return f"{prefix}:channels"


def listener_wake_channel(prefix: str, listener: str) -> str:
    """The pub/sub channel that ends one listener's wait (its ``listener`` id is random)."""
    return f"{prefix}:wake:{listener}"
