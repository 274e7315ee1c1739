"""A consume-transform-produce application (confluent-kafka), run as a subprocess by
`test_transactions_soak.py` so a test can kill -9 it at any point:

    python -m compat_tests.txn_ctp_app BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID END

Reads INPUT (partition 0) in group GROUP with read_committed, writes each value upper-cased to
OUTPUT partition 0 and commits the group's offsets in the same transaction
(`send_offsets_to_transaction`), a few records per transaction.  Prints `ready` once
`init_transactions` returned (which fences an earlier instance and completes its transaction)
and `done` and exits 0 once the group's committed offset reached END.  An abortable error
(or a retriable one) aborts the transaction and rewinds to the committed offsets; a fatal one,
or a failure to abort, exits 3 (the test starts the application again).
"""

from __future__ import annotations

import sys
import time

BATCH = 4


def main(argv: list[str]) -> int:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    bootstrap, src, dst, group, tid, end_s = argv
    end = int(end_s)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 100})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
                         "transaction.timeout.ms": 10000})
    producer.init_transactions(60)
    print("ready", flush=True)
    tp = TopicPartition(src, 0)

    def committed() -> int:
        """The group's committed offset; errors (the group coordinator not loaded yet on a
        fresh or restarted broker: NOT_COORDINATOR) retried for a minute."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return int(consumer.committed([tp], timeout=30)[0].offset)
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def rewind() -> None:
        """Fetch again from the committed offset (assign, not seek: librdkafka refuses a seek
        on a partition that has not started fetching)."""
        offset = committed()
        print(f"rewind {offset}", flush=True)
        consumer.unassign()
        consumer.assign([TopicPartition(src, 0, offset if offset >= 0 else 0)])

    rewind()
    while True:
        msgs = [m for m in consumer.consume(num_messages=BATCH, timeout=0.2) if m.error() is None]
        if not msgs:
            if committed() >= end:
                print("done", flush=True)
                return 0
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, key=m.key(), value=m.value().upper(), partition=0)
            # a window inside the transaction for the test's kill to land in; it also paces
            # the loop (>= 15 s for the 600 inputs), so the app-kill test's kills (at most 20, each at
            # most 0.6 s after `ready`: 12 s of processing at most) always land mid-run, however
            # fast the broker commits
            time.sleep(0.1)
            producer.send_offsets_to_transaction([TopicPartition(src, 0, msgs[-1].offset() + 1)],
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            print(f"committed {msgs[0].offset()}-{msgs[-1].offset()}", flush=True)
        except KafkaException as exc:
            err = exc.args[0]
            print(f"failed {msgs[0].offset()}-{msgs[-1].offset()}: {err}", flush=True)
            if not (err.txn_requires_abort() or err.retriable()):
                print(f"fatal {err}", flush=True)
                return 3
            try:
                producer.abort_transaction(30)
                print("aborted", flush=True)
                rewind()
            except KafkaException as again:  # e.g. the broker still away: start over
                print(f"fatal {again.args[0]}", flush=True)
                return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
