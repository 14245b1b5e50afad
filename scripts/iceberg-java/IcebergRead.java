// Reads an Iceberg table with the Iceberg project's Java library (iceberg-data's generic
// reader, IcebergGenerics: position and equality deletes applied) through the JdbcCatalog over
// PostgreSQL, and prints its rows as JSON lines in the forms scripts/iceberg-read (pyiceberg)
// prints: decimals as plain text, dates, times and timestamps as ISO text with microseconds
// (timestamptz with +00:00), UUIDs in their usual form, binary in hex. For
// scripts/iceberg-read-java.
//
//   java IcebergRead CATALOG_URI CATALOG_NAME NAMESPACE.TABLE [--count]
import java.nio.ByteBuffer;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.math.BigDecimal;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.types.Types;

public class IcebergRead {
  static final DateTimeFormatter LOCAL = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSS");
  static final DateTimeFormatter ZONED = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSSxxx");
  static final DateTimeFormatter TIME = DateTimeFormatter.ofPattern("HH:mm:ss.SSSSSS");

  /**
   * A REST catalog at uri, the tables' files on S3 through S3FileIO: the endpoint from
   * S3_ENDPOINT (path-style, as for moto or MinIO), credentials and region from the AWS_*
   * variables (region us-east-1 when unset).
   */
  static org.apache.iceberg.catalog.Catalog restCatalog(String uri, String name) {
    Map<String, String> props = new HashMap<>();
    props.put("uri", uri);
    props.put("io-impl", "org.apache.iceberg.aws.s3.S3FileIO");
    String endpoint = System.getenv("S3_ENDPOINT");
    if (endpoint != null) {
      props.put("s3.endpoint", endpoint);
      props.put("s3.path-style-access", "true");
    }
    String region = System.getenv("AWS_REGION");
    props.put("client.region", region == null ? "us-east-1" : region);
    org.apache.iceberg.rest.RESTCatalog catalog = new org.apache.iceberg.rest.RESTCatalog();
    catalog.setConf(new org.apache.hadoop.conf.Configuration());
    catalog.initialize(name, props);
    return catalog;
  }

  static org.apache.iceberg.catalog.Catalog jdbcCatalog(String text, String name) {
    URI uri = URI.create(text.replaceFirst("^postgres(ql)?://", "postgresql://"));
    Map<String, String> props = new HashMap<>();
    String host = uri.getHost() == null ? "localhost" : uri.getHost();
    String port = uri.getPort() < 0 ? "" : ":" + uri.getPort();
    props.put("uri", "jdbc:postgresql://" + host + port + uri.getRawPath());
    String userInfo = uri.getRawUserInfo();
    if (userInfo != null) {
      String[] parts = userInfo.split(":", 2);
      props.put("jdbc.user", URLDecoder.decode(parts[0], StandardCharsets.UTF_8));
      if (parts.length > 1) props.put("jdbc.password", URLDecoder.decode(parts[1], StandardCharsets.UTF_8));
    }
    String password = System.getenv("PGPASSWORD");
    if (password != null && !props.containsKey("jdbc.password")) props.put("jdbc.password", password);
    props.put("warehouse", "file:///nonexistent");
    props.put("jdbc.schema-version", "V1");
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.setConf(new org.apache.hadoop.conf.Configuration());
    catalog.initialize(name, props);
    return catalog;
  }

  public static void main(String[] args) throws Exception {
    List<String> positional = new ArrayList<>();
    boolean count = false;
    for (String arg : args) {
      if (arg.equals("--count")) count = true;
      else positional.add(arg);
    }
    if (positional.size() != 3) {
      System.err.println("usage: IcebergRead CATALOG_URI CATALOG_NAME NAMESPACE.TABLE [--count]");
      System.exit(2);
    }
    org.apache.iceberg.catalog.Catalog catalog;
    if (positional.get(0).startsWith("http://") || positional.get(0).startsWith("https://")) {
      catalog = restCatalog(positional.get(0), positional.get(1));
    } else {
      catalog = jdbcCatalog(positional.get(0), positional.get(1));
    }
    Table table = catalog.loadTable(TableIdentifier.parse(positional.get(2)));
    List<Types.NestedField> columns = table.schema().columns();
    List<String> lines = new ArrayList<>();
    long rows = 0;
    try (CloseableIterable<Record> records = IcebergGenerics.read(table).build()) {
      for (Record record : records) {
        rows++;
        if (count) continue;
        TreeMap<String, Object> sorted = new TreeMap<>();
        for (Types.NestedField column : columns) {
          Object value = record.getField(column.name());
          // The generic reader may hand a uuid column's 16 bytes over as they are.
          if (column.type().typeId() == org.apache.iceberg.types.Type.TypeID.UUID) {
            if (value instanceof byte[]) value = ByteBuffer.wrap((byte[]) value);
            if (value instanceof ByteBuffer) {
              ByteBuffer bytes = ((ByteBuffer) value).duplicate();
              value = new java.util.UUID(bytes.getLong(), bytes.getLong());
            }
          }
          sorted.put(column.name(), value);
        }
        StringBuilder line = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<String, Object> entry : sorted.entrySet()) {
          if (!first) line.append(", ");
          first = false;
          line.append(quote(entry.getKey())).append(": ").append(json(entry.getValue()));
        }
        lines.add(line.append("}").toString());
      }
    }
    if (count) {
      System.out.println(rows);
    } else {
      lines.sort(null);
      for (String line : lines) System.out.println(line);
    }
    if (catalog instanceof java.io.Closeable) ((java.io.Closeable) catalog).close();
  }

  static String json(Object value) {
    if (value == null) return "null";
    if (value instanceof Boolean || value instanceof Integer || value instanceof Long) return value.toString();
    if (value instanceof Float) return Double.toString(((Float) value).doubleValue());
    if (value instanceof Double) return value.toString();
    if (value instanceof BigDecimal) return quote(((BigDecimal) value).toPlainString());
    if (value instanceof LocalDate) return quote(value.toString());
    if (value instanceof LocalTime) return quote(TIME.format((LocalTime) value));
    if (value instanceof LocalDateTime) return quote(LOCAL.format((LocalDateTime) value));
    if (value instanceof OffsetDateTime) {
      return quote(ZONED.format(((OffsetDateTime) value).withOffsetSameInstant(ZoneOffset.UTC)));
    }
    if (value instanceof ByteBuffer) {
      ByteBuffer bytes = ((ByteBuffer) value).duplicate();
      StringBuilder hex = new StringBuilder();
      while (bytes.hasRemaining()) hex.append(String.format("%02x", bytes.get() & 0xff));
      return quote(hex.toString());
    }
    if (value instanceof byte[]) return json(ByteBuffer.wrap((byte[]) value));
    return quote(value.toString());
  }

  static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"': out.append("\\\""); break;
        case '\\': out.append("\\\\"); break;
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        default:
          if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
          else out.append(c);
      }
    }
    return out.append('"').toString();
  }
}
