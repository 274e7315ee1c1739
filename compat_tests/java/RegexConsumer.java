// A KIP-848 consumer (group.protocol=consumer) subscribed with a broker-side regular expression
// (SubscriptionPattern: the group coordinator resolves it), for compat_tests/test_regex_subscription.py.
// Run as a single source file (JDK 11+):
//   java -cp 'compat_tests/java/lib/*' compat_tests/java/RegexConsumer.java BOOTSTRAP GROUP REGEX
// Polls until a line (or EOF) arrives on stdin, then closes. Prints, one fact a line:
//   assigned TOPIC-PARTITION ...   after each assignment change (the rebalance listener)
//   got TOPIC PARTITION OFFSET VALUE   per record
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Collection;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class RegexConsumer {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[1]);
        p.put("group.protocol", "consumer");
        p.put("auto.offset.reset", "earliest");
        p.put("client.id", "compat-regex");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                in.readLine();
            } catch (Exception e) {
                // EOF or error: stop either way
            }
            stop.set(true);
        });
        reader.setDaemon(true);
        reader.start();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            TreeSet<String> owned = new TreeSet<>();
            consumer.subscribe(new SubscriptionPattern(args[2]), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions) owned.remove(tp.toString());
                    System.out.println("assigned " + String.join(" ", owned));
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions) owned.add(tp.toString());
                    System.out.println("assigned " + String.join(" ", owned));
                }
            });
            while (!stop.get()) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("got " + r.topic() + " " + r.partition() + " " + r.offset() + " " + r.value());
                }
                System.out.flush();
            }
        }
    }
}
