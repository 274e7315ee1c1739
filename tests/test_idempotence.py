"""Sequence checks of idempotent producers, against the cases Kafka's ProducerStateManager names,
and the window they are checked against."""

from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage.producers import (
    INT32_MAX,
    BatchMeta,
    ProducerAppend,
    ProducerWindow,
    check_sequence,
)


def state(epoch, *batches):
    return ProducerWindow(epoch, tuple(BatchMeta(*b) for b in batches))


def test_unknown_producer_accepts_any_sequence():
    assert check_sequence(None, 0, 17, 3) == (ErrorCode.NONE, None)


def test_next_in_order_is_written():
    s = state(0, (0, 9, 100, 109))
    assert check_sequence(s, 0, 10, 5) == (ErrorCode.NONE, None)


def test_exact_retry_returns_original_offset():
    s = state(0, (0, 9, 100, 109), (10, 14, 110, 114))
    assert check_sequence(s, 0, 0, 10) == (ErrorCode.NONE, 100)
    assert check_sequence(s, 0, 10, 5) == (ErrorCode.NONE, 110)


def test_gap_is_out_of_order():
    s = state(0, (0, 9, 100, 109))
    assert check_sequence(s, 0, 12, 5).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_older_than_window_is_duplicate():
    s = state(0, *[(i * 10, i * 10 + 9, i * 10, i * 10 + 9) for i in range(5, 10)])
    assert check_sequence(s, 0, 0, 10).error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER


def test_partial_overlap_inside_window_is_out_of_order():
    s = state(0, (0, 9, 100, 109), (10, 19, 110, 119))
    assert check_sequence(s, 0, 5, 10).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_fenced_epoch_and_new_epoch():
    s = state(3, (0, 9, 100, 109))
    assert check_sequence(s, 2, 10, 1).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert check_sequence(s, 4, 0, 1) == (ErrorCode.NONE, None)
    assert check_sequence(s, 4, 10, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_wraps_at_int32_max():
    s = state(0, (INT32_MAX - 4, INT32_MAX, 100, 104))
    assert check_sequence(s, 0, 0, 5) == (ErrorCode.NONE, None)
    s = state(0, (INT32_MAX - 1, 2, 100, 104))
    assert check_sequence(s, 0, INT32_MAX - 1, 5) == (ErrorCode.NONE, 100)


def test_window_keeps_the_last_five_batches_of_the_epoch():
    window = None
    for i in range(7):
        window = ProducerAppend(5, 1, 2 * i, 2, window).window_at(3 * i)
    assert window == state(1, *[(2 * i, 2 * i + 1, 3 * i, 3 * i + 1) for i in range(2, 7)])
    assert check_sequence(window, 1, 8, 2) == (ErrorCode.NONE, 12)
    assert check_sequence(window, 1, 2, 2).error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER  # evicted
    # a new epoch starts a fresh window; the last sequence wraps at Int32.MAX
    window = ProducerAppend(5, 2, INT32_MAX - 1, 3, window).window_at(21)
    assert window == state(2, (INT32_MAX - 1, 0, 21, 23))
    assert check_sequence(window, 2, 1, 1) == (ErrorCode.NONE, None)
