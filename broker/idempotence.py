"""Idempotent-producer sequence checks, as Apache Kafka's ProducerStateManager makes them.

For each (partition, producer id) the broker remembers the epoch and the last five batches'
sequence ranges with their offsets. A retried batch that matches one of them is answered
with its original offset and not written again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an
older sequence outside the remembered window is DUPLICATE_SEQUENCE_NUMBER; an older epoch is
INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

from typing import NamedTuple

from tmqgate.protocol.errors import ErrorCode

INT32_MAX = 2**31 - 1
REMEMBERED_BATCHES = 5


class SequenceVerdict(NamedTuple):
    """What to do with a batch: write it (error NONE, duplicate_of None), answer it with an
    earlier write's base offset (duplicate_of set), or refuse it with `error`."""

    error: ErrorCode
    duplicate_of: int | None = None


def next_sequence(seq: int, count: int) -> int:
    """Sequences wrap at Int32.MAX to 0, as the Kafka producer numbers them."""
    return (seq + count) % (INT32_MAX + 1)


def check_sequence(state: tuple[int, list[tuple[int, int, int, int]]] | None, epoch: int,
                   first_seq: int, record_count: int) -> SequenceVerdict:
    """Judge a batch against the producer's state `(epoch, [(first_seq, last_seq, base, last)])`."""
    if state is None:
        # Unknown producer (new, or its state expired): accept any sequence (KIP-360).
        return SequenceVerdict(ErrorCode.NONE)
    known_epoch, batches = state
    if epoch < known_epoch:
        return SequenceVerdict(ErrorCode.INVALID_PRODUCER_EPOCH)
    if epoch > known_epoch:
        if first_seq != 0:
            return SequenceVerdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return SequenceVerdict(ErrorCode.NONE)
    last_seq = (first_seq + record_count - 1) % (INT32_MAX + 1)
    for b_first, b_last, b_base, _b_last_offset in batches:
        if b_first == first_seq and b_last == last_seq:
            return SequenceVerdict(ErrorCode.NONE, b_base)
    if not batches:
        return SequenceVerdict(ErrorCode.NONE)
    expected = next_sequence(batches[-1][1], 1)
    if first_seq == expected:
        return SequenceVerdict(ErrorCode.NONE)
    oldest = batches[0][0]
    if _seq_before(first_seq, expected) and not _seq_before(first_seq, oldest):
        # Inside the remembered window but matching no batch exactly: the producer is confused.
        return SequenceVerdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    if _seq_before(first_seq, oldest):
        return SequenceVerdict(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
    return SequenceVerdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


def _seq_before(a: int, b: int) -> bool:
    """True when sequence a comes before b, allowing for the wrap at Int32.MAX."""
    diff = (b - a) % (INT32_MAX + 1)
    return 0 < diff < (INT32_MAX + 1) // 2
