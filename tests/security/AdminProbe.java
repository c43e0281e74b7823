// Tries every admin call the security tests judge, through a broker listener
// (bootstrap.servers) or the KRaft controller listener (bootstrap.controllers, which only the
// Java AdminClient speaks), for several clients at once, and prints one line per call:
//   <client> <call> OK
//   <client> <call> DENIED <exception class>: <message>
// Run as a single-file source program (JDK 11+), one triple per client:
//   java -cp '<kafka libs>/*' AdminProbe.java NAME server|controller HOST:PORT PROPS ...
// PROPS is a properties file with the client's security settings, or '-' for none
// (PLAINTEXT, no credentials); its optional probe.topic names the topic whose config is altered.
import java.io.FileReader;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.*;

public class AdminProbe {
    static List<String> probe(String name, String kind, String addr, String props) throws Exception {
        Properties p = new Properties();
        if (!props.equals("-")) {
            try (FileReader r = new FileReader(props)) {
                p.load(r);
            }
        }
        p.put(kind.equals("controller") ? "bootstrap.controllers" : "bootstrap.servers", addr);
        p.putIfAbsent("default.api.timeout.ms", "8000");
        p.putIfAbsent("request.timeout.ms", "4000");
        p.putIfAbsent("reconnect.backoff.max.ms", "500");
        // the calls run at once; each may take the client's whole API timeout, plus slack
        long waitMs = Long.parseLong(p.getProperty("default.api.timeout.ms")) + 10_000L;
        String topic = (String) p.remove("probe.topic");
        if (topic == null) topic = "argus.alerts";
        String mark = UUID.randomUUID().toString().substring(0, 8);
        Map<String, KafkaFuture<?>> calls = new LinkedHashMap<>();
        List<String> out = new ArrayList<>();
        try (Admin admin = Admin.create(p)) {
            calls.put("describe_acls", admin.describeAcls(AclBindingFilter.ANY).values());
            AclBinding grant = new AclBinding(
                new ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL),
                new AccessControlEntry("User:mallory-" + mark, "*", AclOperation.ALL,
                                       AclPermissionType.ALLOW));
            calls.put("create_acls", admin.createAcls(List.of(grant)).all());
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("retention.ms", "86400000"),
                                                 AlterConfigOp.OpType.SET);
            calls.put("alter_configs", admin.incrementalAlterConfigs(Map.of(res, List.of(op))).all());
            calls.put("create_topics",
                      admin.createTopics(List.of(new NewTopic("mallory-" + mark, 1, (short) 1))).all());
            for (Map.Entry<String, KafkaFuture<?>> c : calls.entrySet()) {
                String head = name + " " + c.getKey();
                try {
                    c.getValue().get(waitMs, TimeUnit.MILLISECONDS);
                    out.add(head + " OK");
                } catch (ExecutionException e) {
                    Throwable t = e.getCause();
                    out.add(head + " DENIED " + t.getClass().getSimpleName() + ": "
                            + String.valueOf(t.getMessage()).replace('\n', ' '));
                } catch (TimeoutException e) {
                    out.add(head + " DENIED timeout");
                }
            }
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, args.length / 4));
        List<Future<List<String>>> runs = new ArrayList<>();
        for (int i = 0; i + 3 < args.length; i += 4) {
            final int j = i;
            runs.add(pool.submit(() -> probe(args[j], args[j + 1], args[j + 2], args[j + 3])));
        }
        for (Future<List<String>> r : runs) {
            for (String line : r.get()) System.out.println(line);
        }
        pool.shutdown();
    }
}
