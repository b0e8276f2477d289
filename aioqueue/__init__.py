"""aioqueue: an asyncio-native task queue on Redis, at-least-once, fast and typed.

app = aioqueue.App(redis_url="redis://127.0.0.1:6379/0")

@app.task(queue="emails", timeout=30)
async def send_email(to: str, subject: str) -> str: ...

job = await send_email.enqueue("a@b.c", subject="hi")
print(await job.result(timeout=5))
"""

from .app import App
from .client.enqueue import JobOptions
from .client.job import Job
from .client.messaging import ChannelInfo, Group, Mailbox, Message
from .client.queue import EnqueueCall, Queue
from .client.task import Task
from .client.topics import DeadMessage, GroupInfo, Topic, TopicInfo
from .client.workflows import Batch, BatchSummary, Flow, FlowStatus, Workflow, chain, chord, flow
from .core import __version__
from .core.backoff import Backoff, Exponential, Fixed
from .core.dependencies import Depends
from .core.errors import (
    AioqueueError,
    AuthenticationFailed,
    ChildFailed,
    ConfigError,
    DependencyFailed,
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
from .core.handlers import Subscriber, TaskOptions
from .core.limits import QueueLimits, TenantLimits
from .core.middleware import JobContext, current_job
from .core.observers import JobEvent, Observer
from .core.periodic import Periodic
from .core.records import (
    ErrorInfo,
    JobInfo,
    JobPage,
    JobStatus,
    MinuteCounts,
    QueueCounts,
    ScheduledJob,
    TenantCount,
)
from .worker import Worker

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
    "DependencyFailed",
    "Depends",
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
    "JobPage",
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
    "TenantCount",
    "TenantLimits",
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
