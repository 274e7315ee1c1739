// The Java client's transactional producer (kafka-clients from compat_tests/java/lib) against
// the broker, run as a single source file as compat_tests/txn_java.py does:
//   java -cp 'compat_tests/java/lib/*' compat_tests/java/TxnClient.java BOOTSTRAP MODE TOPIC TXNID
// MODE interleaved: three transactions on partition 0 of TOPIC (committed a0..a2, aborted
//   b0 b1, committed c0 c1; each flushed before it ends), then the partition read from the
//   start by a read_committed and a read_uncommitted consumer, each until its position
//   reaches the end offset.  Prints
//     sent KEY OFFSET                  per record, from the producer's RecordMetadata
//     read_committed OFFSET KEY VALUE  per record the read_committed consumer got
//     read_uncommitted OFFSET KEY VALUE
// Every mode first prints `client VERSION`, the kafka-clients version on the class path.
// MODE fenced: producer 1 begins a transaction and sends x1; producer 2 with the same
//   transactional.id calls initTransactions; producer 1 sends x2 and commits (fenced_commit:
//   commits without sending x2); producer 2 commits a transaction with y.  Prints
//     send EXCEPTION_CLASS             what producer 1's send of x2 failed with (cause unwrapped)
//     commit EXCEPTION_CLASS [CAUSE]   what producer 1's commitTransaction threw
//     committed2 OFFSET                the offset of producer 2's record y in its committed txn
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnClient {
    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txnId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    static void txn(KafkaProducer<String, String> producer, String topic, boolean commit, String... keys)
            throws Exception {
        producer.beginTransaction();
        for (String key : keys) {
            RecordMetadata md = producer.send(new ProducerRecord<>(topic, 0, key, "value-" + key)).get();
            System.out.println("sent " + key + " " + md.offset());
        }
        producer.flush();
        if (commit) {
            producer.commitTransaction();
        } else {
            producer.abortTransaction();
        }
    }

    static void read(String bootstrap, String topic, String isolation) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", isolation);
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            long deadline = System.currentTimeMillis() + 60_000;
            while (consumer.position(tp) < end && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(isolation + " " + r.offset() + " " + r.key() + " " + r.value());
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String mode = args[1];
        String topic = args[2];
        String txnId = args[3];
        System.out.println("client " + org.apache.kafka.common.utils.AppInfoParser.getVersion());
        if (mode.equals("interleaved")) {
            try (KafkaProducer<String, String> producer = producer(bootstrap, txnId)) {
                txn(producer, topic, true, "a0", "a1", "a2");
                txn(producer, topic, false, "b0", "b1");
                txn(producer, topic, true, "c0", "c1");
            }
            read(bootstrap, topic, "read_committed");
            read(bootstrap, topic, "read_uncommitted");
        } else if (mode.equals("fenced") || mode.equals("fenced_commit")) {
            KafkaProducer<String, String> first = producer(bootstrap, txnId);
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, "x1", "value-x1")).get();
            try (KafkaProducer<String, String> second = producer(bootstrap, txnId)) {
                if (mode.equals("fenced")) {
                    try {
                        first.send(new ProducerRecord<>(topic, 0, "x2", "value-x2")).get();
                        System.out.println("send ok");
                    } catch (ExecutionException e) {
                        System.out.println("send " + e.getCause().getClass().getName());
                    }
                }
                try {
                    first.commitTransaction();
                    System.out.println("commit ok");
                } catch (Exception e) {
                    System.out.println("commit " + e.getClass().getName()
                        + (e.getCause() == null ? "" : " " + e.getCause().getClass().getName()));
                }
                first.close(Duration.ZERO);
                second.beginTransaction();
                RecordMetadata md = second.send(new ProducerRecord<>(topic, 0, "y", "value-y")).get();
                second.commitTransaction();
                System.out.println("committed2 " + md.offset());
            }
        } else {
            throw new IllegalArgumentException("unknown mode " + mode);
        }
    }
}
