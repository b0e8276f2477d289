"""aioqueue: an asyncio-native task queue on Redis, at-least-once, fast and typed.

app = aioqueue.App(redis_url="redis://127.0.0.1:6379/0")

@app.task(queue="emails", timeout=30)
async def send_email(to: str, subject: str) -> str: ...

job = await send_email.enqueue("a@b.c", subject="hi")
print(await job.result(timeout=5))
"""

from .app import App
from .backoff import Backoff, Exponential, Fixed
from .enqueue import JobOptions
from .errors import (
    AioqueueError,
    AuthenticationFailed,
    ChildFailed,
    ConfigError,
    EnqueueError,
    EnqueueUnconfirmed,
    InvalidArguments,
    JobCancelled,
    JobError,
    JobExpired,
    JobFailed,
    JobNotFound,
    LeaseExpired,
    LeaseLost,
    NotAMember,
    NotReplicated,
    PayloadTooLarge,
    PermissionDenied,
    ResultTimeout,
    Retry,
    SerializationError,
    ServerOutOfMemory,
    ServerRefused,
    ServerUnavailable,
    TlsFailed,
    UnknownTask,
)
from .job import Job
from .limits import QueueLimits
from .messaging import ChannelInfo, Group, Mailbox, Message
from .middleware import JobContext, current_job
from .observers import JobEvent, Observer
from .periodic import Periodic
from .queue import EnqueueCall, Queue
from .store.records import (
    ErrorInfo,
    JobInfo,
    JobStatus,
    MinuteCounts,
    QueueCounts,
    ScheduledJob,
)
from .task import Task, TaskOptions
from .topics import DeadMessage, GroupInfo, Subscriber, Topic, TopicInfo
from .worker import Worker
from .workflows import Batch, BatchSummary, Flow, FlowStatus, Workflow, chain, chord, flow

__version__ = "0.1.0"

__all__ = [
    "AioqueueError",
    "App",
    "AuthenticationFailed",
    "Backoff",
    "Batch",
    "BatchSummary",
    "ChannelInfo",
    "ChildFailed",
    "ConfigError",
    "DeadMessage",
    "EnqueueCall",
    "EnqueueError",
    "EnqueueUnconfirmed",
    "ErrorInfo",
    "Exponential",
    "Fixed",
    "Flow",
    "FlowStatus",
    "Group",
    "GroupInfo",
    "InvalidArguments",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobEvent",
    "JobExpired",
    "JobFailed",
    "JobInfo",
    "JobNotFound",
    "JobOptions",
    "JobStatus",
    "LeaseExpired",
    "LeaseLost",
    "Mailbox",
    "Message",
    "MinuteCounts",
    "NotAMember",
    "NotReplicated",
    "Observer",
    "PayloadTooLarge",
    "Periodic",
    "PermissionDenied",
    "Queue",
    "QueueCounts",
    "QueueLimits",
    "ResultTimeout",
    "Retry",
    "ScheduledJob",
    "SerializationError",
    "ServerOutOfMemory",
    "ServerRefused",
    "ServerUnavailable",
    "Subscriber",
    "Task",
    "TaskOptions",
    "TlsFailed",
    "Topic",
    "TopicInfo",
    "UnknownTask",
    "Worker",
    "Workflow",
    "__version__",
    "chain",
    "chord",
    "current_job",
    "flow",
]
