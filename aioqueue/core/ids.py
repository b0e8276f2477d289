"""Job ids: the shape of a generated id, and where a done id is kept.

A generated id is 20 characters of base64 in ASCII order, its millisecond first, so ids
sort by time and the jobs enqueued together share a millisecond. A job that completed
with no result keeps only its id's ``fingerprint``, in one of ``DONE_SLOTS`` small sets per
generation of the idempotency window (``keys.QueueKeys.done``); ``done_slot`` says which,
and ``lua/include/done.lua`` computes both the same way.
"""

from __future__ import annotations

import hashlib

DONE_SLOTS = 4096
"""Sets per generation of completed jobs: few enough members each to stay intsets
(set-max-intset-entries: 512 by default) up to 2 million jobs per idempotency window, ~8.3 B
a job; past that, hash tables, ~60 B a job."""


def fingerprint(job_id: bytes) -> int:
    """What a done set keeps of an id: the first 8 bytes of its SHA-1, big-endian, less the
    top bit (a 63-bit integer, 8 B in an intset; lua/include/done.lua computes the same).
    Two ids share one with a chance of 1 in 2^63: a look-up checks two sets of at most
    ~512 each, so a new id is taken for a done one 1 in 9e15 look-ups at most."""
    return int.from_bytes(hashlib.sha1(job_id).digest()[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def done_slot(job_id: bytes) -> int:
    """The done set a job id goes to; lua/include/done.lua computes the same. A generated
    id goes by its millisecond (so the jobs enqueued together share a set), any other by
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
