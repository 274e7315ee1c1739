// One Java share consumer (KIP-932 queues: KafkaShareConsumer of kafka-clients from
// compat_tests/java/lib) in share group GROUP, subscribed to TOPIC, with the connection settings
// of the properties file CONFIG; compiled once and run by compat_tests/share_client.py
// (java_client.program_cmd) as
//   java -cp CLASSES:'compat_tests/java/lib/*' ShareClient CONFIG GROUP TOPIC MODE [OPTION...]
// MODE implicit  share.acknowledgement.mode=implicit: each poll accepts what the last one got,
//                and commitSync() before close() accepts what the last poll got (close() alone
//                releases those records: they come again, their delivery count one higher).
// MODE explicit  share.acknowledgement.mode=explicit: each record is acknowledged by the rules
//                below, then commitSync() after every poll that got records.
// MODE hold      polls until it gets records, prints them and `holding`, then sleeps without
//                acknowledging anything until it is killed.
// MODE config    sets the group configs of the group: options and exits (no consumer).
// OPTIONs:
//   group:KEY=VALUE    set the group config KEY (Admin incrementalAlterConfigs on the GROUP
//                      resource) before subscribing, e.g. group:share.auto.offset.reset=earliest
//   max:N              stop once N records in total were got (default: no limit)
//   idle:MS            stop once MS pass without a record after the first (default 5000)
//   wait:MS            stop if no record comes within MS of subscribing (default 60000)
//   accept:PREFIX, release:PREFIX, reject:PREFIX
//                      (explicit) a record whose value starts with PREFIX gets that
//                      acknowledgement type; the first rule that matches wins
//   release-below:K    (explicit) release a record while its delivery count is below K
//                      (a rule like the others, in its place in the order)
//   otherwise a record is accepted.  A line `stop` on stdin stops the consumer too.
// It ends with close().  Prints, a line each, flushed as they happen:
//   client VERSION                   the kafka-clients version on the class path
//   config KEY=VALUE                 a group config set
//   got PARTITION OFFSET COUNT VALUE per record polled; COUNT is its delivery count (-1: none)
//   lock MS                          acquisitionLockTimeoutMs() after the first records
//   ack PARTITION OFFSET TYPE        (explicit) how it acknowledged a record
//   commit PARTITION RESULT          commitSync's result per partition: ok or the exception's
//                                    class (explicit: after each poll; implicit: before close)
//   acked PARTITION N RESULT         the acknowledgement commit callback: N offsets of
//                                    PARTITION committed, ok or the exception's class
//   holding                          (hold) the records are held from now on
//   closed                           close() returned
import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareClient {
    static volatile boolean stopRequested = false;

    static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static int count(ConsumerRecord<String, String> r) {
        return r.deliveryCount().map(Short::intValue).orElse(-1);
    }

    static void commit(KafkaShareConsumer<String, String> consumer) {
        Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> entry : result.entrySet()) {
            out("commit " + entry.getKey().partition() + " "
                + entry.getValue().map(e -> e.getClass().getName()).orElse("ok"));
        }
    }

    public static void main(String[] args) throws Exception {
        Properties base = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            base.load(in);
        }
        String group = args[1];
        String topic = args[2];
        String mode = args[3];
        List<AlterConfigOp> groupConfigs = new ArrayList<>();
        List<String[]> rules = new ArrayList<>();  // {type, prefix} or {"release-below", K}
        long max = Long.MAX_VALUE;
        long idleMs = 5000;
        long waitMs = 60000;
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split(":", 2);
            switch (kv[0]) {
                case "group": {
                    String[] c = kv[1].split("=", 2);
                    groupConfigs.add(new AlterConfigOp(new ConfigEntry(c[0], c[1]), AlterConfigOp.OpType.SET));
                    break;
                }
                case "max": max = Long.parseLong(kv[1]); break;
                case "idle": idleMs = Long.parseLong(kv[1]); break;
                case "wait": waitMs = Long.parseLong(kv[1]); break;
                case "accept": case "release": case "reject": case "release-below": rules.add(kv); break;
                default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        if (!List.of("implicit", "explicit", "hold", "config").contains(mode)) {
            throw new IllegalArgumentException("unknown mode " + mode);
        }
        out("client " + org.apache.kafka.common.utils.AppInfoParser.getVersion());
        if (!groupConfigs.isEmpty()) {
            try (Admin admin = Admin.create(base)) {
                ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
                admin.incrementalAlterConfigs(Map.of(resource, groupConfigs)).all().get();
            }
            for (AlterConfigOp op : groupConfigs) {
                out("config " + op.configEntry().name() + "=" + op.configEntry().value());
            }
        }
        if (mode.equals("config")) {
            return;
        }

        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                for (String line; (line = r.readLine()) != null; ) {
                    if (line.trim().equals("stop")) {
                        stopRequested = true;
                    }
                }
            } catch (Exception e) {
                // no stdin: only the other conditions stop it
            }
        });
        stdin.setDaemon(true);
        stdin.start();

        boolean explicit = mode.equals("explicit");
        Properties c = new Properties();
        c.putAll(base);
        c.put("group.id", group);
        c.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(c);
        consumer.setAcknowledgementCommitCallback((Map<TopicIdPartition, Set<Long>> offsets, Exception e) -> {
            for (Map.Entry<TopicIdPartition, Set<Long>> entry : offsets.entrySet()) {
                out("acked " + entry.getKey().partition() + " " + entry.getValue().size() + " "
                    + (e == null ? "ok" : e.getClass().getName()));
            }
        });
        consumer.subscribe(List.of(topic));
        long got = 0;
        long last = System.currentTimeMillis();
        boolean first = true;
        while (got < max && !stopRequested) {
            ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
            long now = System.currentTimeMillis();
            if (records.isEmpty()) {
                if (now - last > (first ? waitMs : idleMs)) {
                    break;
                }
                continue;
            }
            last = now;
            for (ConsumerRecord<String, String> r : records) {
                out("got " + r.partition() + " " + r.offset() + " " + count(r) + " " + r.value());
                got++;
            }
            if (first) {
                out("lock " + consumer.acquisitionLockTimeoutMs().map(String::valueOf).orElse("none"));
                first = false;
            }
            if (mode.equals("hold")) {
                out("holding");
                Thread.sleep(Long.MAX_VALUE);
            }
            if (explicit) {
                for (ConsumerRecord<String, String> r : records) {
                    AcknowledgeType type = AcknowledgeType.ACCEPT;
                    for (String[] rule : rules) {
                        boolean match = rule[0].equals("release-below")
                            ? count(r) < Integer.parseInt(rule[1]) : r.value().startsWith(rule[1]);
                        if (match) {
                            type = rule[0].equals("release-below") ? AcknowledgeType.RELEASE
                                : AcknowledgeType.valueOf(rule[0].toUpperCase());
                            break;
                        }
                    }
                    consumer.acknowledge(r, type);
                    out("ack " + r.partition() + " " + r.offset() + " " + type.name());
                }
                commit(consumer);
            }
        }
        if (!explicit) {
            commit(consumer);  // close() alone would release, not accept, what the last poll got
        }
        consumer.close();
        out("closed");
    }
}
