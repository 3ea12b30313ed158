// A JMS peer for the Go topic interop tests (integration/jms_shared_test.go): the
// Artemis core JMS client (the jars of the broker's distribution, $ARTEMIS_HOME/lib),
// run as a single-file Java program:
//
//   java -cp "$ARTEMIS_HOME/lib/*" JmsTopicPeer.java shared-durable URL USER PASSWORD TOPIC SUBSCRIPTION
//
// It subscribes to TOPIC with a shared durable subscription named SUBSCRIPTION, without a
// client id (Session.createSharedDurableConsumer), prints {"event":"ready"} once the consumer
// exists, then receives until its standard input reaches end of file (the Go test closes it),
// acknowledging each message, and prints one JSON line per message ({"event":"received", "type": JMSType, "correlation":
// JMSCorrelationID, "text": the TextMessage text, "properties": {name: value as a string}})
// and {"event":"done","received":N}. Any failure prints {"event":"error","message":...} and
// exits 1. The password is read from the command line and never printed.

import java.util.Enumeration;
import java.util.Map;
import java.util.TreeMap;
import javax.jms.Connection;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.Session;
import javax.jms.TextMessage;
import javax.jms.Topic;
import org.apache.activemq.artemis.jms.client.ActiveMQConnectionFactory;

public class JmsTopicPeer {
    public static void main(String[] args) {
        try {
            if (args.length != 6 || !args[0].equals("shared-durable")) {
                throw new IllegalArgumentException("usage: shared-durable URL USER PASSWORD TOPIC SUBSCRIPTION");
            }
            sharedDurable(args[1], args[2], args[3], args[4], args[5]);
            System.exit(0);
        } catch (Throwable e) {
            emit("{\"event\":\"error\",\"message\":" + quote(e.toString()) + "}");
            System.exit(1);
        }
    }

    static void sharedDurable(String url, String user, String password, String topicName, String subscription) throws Exception {
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                }
            } catch (java.io.IOException e) {
                // end of input either way
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        ActiveMQConnectionFactory cf = new ActiveMQConnectionFactory(url, user, password);
        try (Connection conn = cf.createConnection()) {
            Session session = conn.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            Topic topic = session.createTopic(topicName);
            MessageConsumer consumer = session.createSharedDurableConsumer(topic, subscription);
            conn.start();
            emit("{\"event\":\"ready\"}");
            int n = 0;
            while (!stop.get()) {
                Message m = consumer.receive(200);
                if (m == null) {
                    continue;
                }
                Map<String, String> props = new TreeMap<>();
                for (Enumeration<?> e = m.getPropertyNames(); e.hasMoreElements(); ) {
                    String name = (String) e.nextElement();
                    props.put(name, String.valueOf(m.getObjectProperty(name)));
                }
                String text = m instanceof TextMessage ? ((TextMessage) m).getText() : null;
                StringBuilder sb = new StringBuilder("{\"event\":\"received\",\"type\":").append(quote(m.getJMSType()))
                        .append(",\"correlation\":").append(quote(m.getJMSCorrelationID()))
                        .append(",\"text\":").append(quote(text)).append(",\"properties\":{");
                boolean first = true;
                for (Map.Entry<String, String> p : props.entrySet()) {
                    if (!first) sb.append(',');
                    first = false;
                    sb.append(quote(p.getKey())).append(':').append(quote(p.getValue()));
                }
                emit(sb.append("}}").toString());
                m.acknowledge();
                n++;
            }
            consumer.close();
            emit("{\"event\":\"done\",\"received\":" + n + "}");
        }
    }

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
