// A Kafka Streams 4.3.1 application (kafka-streams from compat_tests/java/connect-lib) against
// the broker, run as a single source file as compat_tests/java_client.py's java_streams does:
//   java -cp 'compat_tests/java/connect-lib/*' compat_tests/java/StreamsCount.java \
//        BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR WINDOW_MS [PACE_MS]
// Topology: INPUT records (key: an event id, value: "REGION,PAYLOAD", timestamp: the event
// time) are re-keyed by REGION (selectKey, so Streams writes and reads a repartition topic
// APP_ID-...-repartition), grouped, counted in tumbling windows of WINDOW_MS by record
// timestamp (grace one day: no record is late) in the state store "counts" (its changelog is
// the compacted topic APP_ID-counts-changelog), and each count update is written to OUTPUT
// with key "REGION@WINDOW_START_MS" and value the count in decimal.  PACE_MS (default 0): a
// pause per input record, so a test can kill the app while it is part-way through its input.
// processing.guarantee=exactly_once_v2: input offsets, repartition/changelog/output writes
// of each commit are one transaction; a consumer of OUTPUT with read_committed sees only
// committed counts.  Runs until SIGTERM (closes cleanly) or SIGKILL.  Prints
//   state NEW_STATE                       on each KafkaStreams state change
//   restored STORE_TOPIC PARTITION COUNT  when a store partition's restoration ends
//   processed N                           after every 500th input record this run processed
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.WindowStore;

public class StreamsCount {
    static final java.util.concurrent.atomic.AtomicLong PROCESSED = new java.util.concurrent.atomic.AtomicLong();

    static void pause(long ms) {
        long n = PROCESSED.incrementAndGet();
        if (n % 500 == 0) {
            System.out.println("processed " + n);
        }
        if (ms <= 0) {
            return;
        }
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3], stateDir = args[4];
        long windowMs = Long.parseLong(args[5]);
        long paceMs = args.length > 6 ? Long.parseLong(args[6]) : 0;

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .peek((id, value) -> pause(paceMs))
            .selectKey((id, value) -> value.split(",", 2)[0])
            .groupByKey(Grouped.with("by-region", Serdes.String(), Serdes.String()))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(windowMs), Duration.ofDays(1)))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("counts"))
            .toStream()
            .map((w, count) -> KeyValue.pair(w.key() + "@" + w.window().start(), Long.toString(count)))
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> System.out.println("state " + now));
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) { }
            public void onBatchRestored(TopicPartition tp, String store, long end, long n) { }
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                System.out.println("restored " + tp.topic() + " " + tp.partition() + " " + total);
            }
        });
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
