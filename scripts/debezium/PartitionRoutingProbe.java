// The partitions Debezium's own PartitionRouting computes for a set of change events, which
// sluice's unit test (src/transform/partition.rs, partitions_are_debeziums) expects. Run with
// the capture's class path (Kafka Connect and Debezium 3.7 from scripts/debezium/pom.xml):
//
//   mvn -q -o -f scripts/debezium/pom.xml dependency:build-classpath -Dmdep.outputFile=/tmp/cp
//   java -cp "$(cat /tmp/cp)" scripts/debezium/PartitionRoutingProbe.java
//
// Each line: hash function, payload fields, partition count, the event (op and row), and the
// partition (or "kept" when the record is left as it is).
import java.math.BigDecimal;
import java.util.List;
import java.util.Map;

import org.apache.kafka.connect.data.Decimal;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Timestamp;
import org.apache.kafka.connect.source.SourceRecord;

import io.debezium.transforms.partitions.PartitionRouting;

public class PartitionRoutingProbe {
    static final Schema ROW = SchemaBuilder.struct().name("p.public.t.Value").optional()
            .field("id", Schema.INT32_SCHEMA)
            .field("name", Schema.OPTIONAL_STRING_SCHEMA)
            .field("big", Schema.OPTIONAL_INT64_SCHEMA)
            .field("small", Schema.OPTIONAL_INT16_SCHEMA)
            .field("f", Schema.OPTIONAL_FLOAT32_SCHEMA)
            .field("d", Schema.OPTIONAL_FLOAT64_SCHEMA)
            .field("flag", Schema.OPTIONAL_BOOLEAN_SCHEMA)
            .field("price", Decimal.builder(2).optional().build())
            .field("at", Timestamp.builder().optional().build())
            .build();
    static final Schema SOURCE = SchemaBuilder.struct().name("io.debezium.connector.postgresql.Source")
            .field("table", Schema.STRING_SCHEMA).build();
    static final Schema ENVELOPE = SchemaBuilder.struct().name("p.public.t.Envelope").version(2)
            .field("before", ROW).field("after", ROW).field("source", SOURCE)
            .field("op", Schema.STRING_SCHEMA).build();

    static Struct row(int id, String name, Long big, Short small, Float f, Double d, Boolean flag,
                      BigDecimal price, Long at) {
        Struct s = new Struct(ROW).put("id", id).put("name", name).put("big", big).put("small", small)
                .put("f", f).put("d", d).put("flag", flag).put("price", price);
        if (at != null) {
            s.put("at", new java.util.Date(at));
        }
        return s;
    }

    public static void main(String[] args) {
        Struct[] rows = {
            row(1, "alice", 5L, (short) 3, 1.5f, 2.25, true, new BigDecimal("12.34"), 1_700_000_000_123L),
            row(-7, "Ünïcödé 😀", -1L, (short) -2, -0.1f, -1.0E-7, false, new BigDecimal("-0.05"), -1L),
            row(2147483647, "", 9_000_000_000L, null, Float.NaN, Double.NaN, null, new BigDecimal("123456789012345678901234567.89"), null),
            row(42, null, null, null, null, null, null, null, null),
        };
        List<String> specs = List.of("change.id", "change.name", "after.big", "change.small",
                "change.f", "change.d", "change.flag", "change.price", "change.at",
                "change.id,source.table", "op", "change.missing", "change.name,change.big");
        for (String hash : List.of("java", "murmur")) {
            for (String spec : specs) {
                for (int n : new int[] {3, 7}) {
                    PartitionRouting<SourceRecord> t = new PartitionRouting<>();
                    t.configure(Map.of("partition.payload.fields", spec, "partition.topic.num", n,
                            "partition.hash.function", hash));
                    for (int r = 0; r < rows.length; r++) {
                        for (String op : List.of("c", "d")) {
                            Struct env = new Struct(ENVELOPE)
                                    .put("source", new Struct(SOURCE).put("table", "t"))
                                    .put("op", op);
                            env.put(op.equals("d") ? "before" : "after", rows[r]);
                            SourceRecord rec = new SourceRecord(Map.of(), Map.of(), "p.public.t", null,
                                    null, null, ENVELOPE, env);
                            String out;
                            try {
                                SourceRecord res = t.apply(rec);
                                out = res.kafkaPartition() == null ? "kept" : res.kafkaPartition().toString();
                            }
                            catch (RuntimeException e) {
                                out = "error";
                            }
                            System.out.println(hash + " " + spec + " " + n + " " + op + " " + r + " " + out);
                        }
                    }
                }
            }
        }
    }
}
