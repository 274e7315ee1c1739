"""The broker's one error convention: a refused request part raises `KafkaError` carrying the
Kafka `ErrorCode` (and the message Kafka would give, if any); the handler that catches it
puts `int(exc.code)` and `exc.message` in the response. Subsystems subclass it to say where
the refusal comes from (`topics.TopicError`, `handlers.produce.ProduceError`)."""

from __future__ import annotations

from tmqgate.protocol.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """A refusal Kafka answers with `code`; `message` is the response's error message (None
    when Kafka gives none, and then the exception's text is the code's name)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
