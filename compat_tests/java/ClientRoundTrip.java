// The Java client (kafka-clients from compat_tests/java/lib) end to end with the connection
// settings of a properties file: Admin creates the topic and describes the cluster, a producer
// sends COUNT keyed records (acks=all), a consumer in GROUP reads them back and commits.
// Run as a single source file (JDK 11+), as compat_tests/java_client.py does:
//   java -cp 'compat_tests/java/lib/*' compat_tests/java/ClientRoundTrip.java CONFIG TOPIC COUNT GROUP
// Prints what the test checks, one fact a line:
//   node HOST:PORT              per broker Admin's describeCluster returns
//   sent PARTITION OFFSET       per record, from the producer's RecordMetadata
//   got OFFSET KEY VALUE        per record the consumer read
//   committed OFFSET            the group's committed offset of partition 0, read back by Admin
import java.io.FileInputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClientRoundTrip {
    public static void main(String[] args) throws Exception {
        Properties base = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            base.load(in);
        }
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args[3];

        try (Admin admin = Admin.create(base)) {
            for (Node node : admin.describeCluster().nodes().get()) {
                System.out.println("node " + node.host() + ":" + node.port());
            }
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }

        Properties p = new Properties();
        p.putAll(base);
        p.put("acks", "all");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
            }
            for (java.util.concurrent.Future<RecordMetadata> f : sent) {
                RecordMetadata md = f.get();
                System.out.println("sent " + md.partition() + " " + md.offset());
            }
        }

        Properties c = new Properties();
        c.putAll(base);
        c.put("group.id", group);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        int got = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println("got " + r.offset() + " " + r.key() + " " + r.value());
                    got++;
                }
            }
            consumer.commitSync();
        }
        try (Admin admin = Admin.create(base)) {
            Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            OffsetAndMetadata om = offsets.get(new TopicPartition(topic, 0));
            System.out.println("committed " + (om == null ? -1 : om.offset()));
        }
        System.exit(got == count ? 0 : 1);
    }
}
