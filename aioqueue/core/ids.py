"""Job ids: the shape of a generated id, and the done slot an id belongs to.

A generated id is 20 characters of base64 in ASCII order, its millisecond first, so ids
sort by time and the jobs enqueued together share a millisecond. A job that completed
with no result keeps only its id, in one of ``DONE_SLOTS`` small hashes per generation
of the idempotency window (``keys.QueueKeys.done``); ``done_slot`` says which, and
``lua/include/done.lua`` computes the same.
"""

from __future__ import annotations

DONE_SLOTS = 4096
"""Hashes per generation of completed jobs: few enough entries each to stay listpack-
encoded (hash-max-listpack-entries: 512 by default, 128 in the shipped redis.conf) up to
2 (or 0.5) million jobs per idempotency window; past that, ~88 B a job, not ~26 B."""


def done_slot(job_id: bytes) -> int:
    """The done hash a job id goes to; lua/include/done.lua computes the same. A generated
    id goes by its millisecond (so the jobs enqueued together share a hash), any other by
    a hash of its last six bytes (zero-padded numbers included: see GENERATED_SINCE)."""
    if _generated_shape(job_id):
        return _sextet(job_id[6]) * 64 + _sextet(job_id[7])
    slot = 0
    for byte in job_id[-6:]:
        slot = (slot * 31 + byte) % DONE_SLOTS
    return slot


GENERATED_ID_LENGTH = 20
GENERATED_ID_ALPHABET = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"
"""Base64 in ASCII order (so generated ids sort by time), URL-safe, no leading dash."""


GENERATED_SINCE = 1397
"""Characters 2 and 3 of a generated id, read as 12 bits (bits 30-41 of its millisecond),
are at least this since mid-2017 (1397 << 30 ms): a 20-character id that starts with "0"
and reads lower there (say a zero-padded number) is not taken for a generated one."""


def _generated_shape(job_id: bytes) -> bool:
    return (
        len(job_id) == GENERATED_ID_LENGTH
        and job_id[0] == ord("0")
        and _sextet(job_id[1]) * 64 + _sextet(job_id[2]) >= GENERATED_SINCE
    )


def _sextet(byte: int) -> int:
    position = GENERATED_ID_ALPHABET.find(byte)
    return 63 if position < 0 else position
