"""Sequence checks of idempotent producers, against the cases Kafka's ProducerStateManager names."""

from tmqgate.broker.idempotence import INT32_MAX, check_sequence
from tmqgate.protocol.errors import ErrorCode


def state(epoch, *batches):
    return (epoch, list(batches))


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
