// bench/run's reference reader for a MySQL 8 binlog backlog: Debezium's binlog client
// (mysql-binlog-connector-java), reading from a file and position until an end position,
// decoding every row event and counting its rows. MySQL's own mysqlbinlog is not available
// here (the server comes from a jar that bundles mysqld only, and MariaDB's mariadb-binlog
// refuses MySQL 8 servers).
//
//   java -cp 'libs/*:classes' BinlogReader HOST PORT USER PASSWORD SERVER_ID FILE POS END_FILE END_POS
//
// Prints {"rows": N, "seconds": S}: S from the connection to the end position.
import com.github.shyiko.mysql.binlog.BinaryLogClient;
import com.github.shyiko.mysql.binlog.event.DeleteRowsEventData;
import com.github.shyiko.mysql.binlog.event.EventData;
import com.github.shyiko.mysql.binlog.event.EventHeaderV4;
import com.github.shyiko.mysql.binlog.event.UpdateRowsEventData;
import com.github.shyiko.mysql.binlog.event.WriteRowsEventData;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public class BinlogReader {
    public static void main(String[] args) throws Exception {
        String password = args[3].equals("-") ? "" : args[3];
        BinaryLogClient client =
                new BinaryLogClient(args[0], Integer.parseInt(args[1]), args[2], password);
        client.setServerId(Long.parseLong(args[4]));
        client.setBinlogFilename(args[5]);
        client.setBinlogPosition(Long.parseLong(args[6]));
        client.setKeepAlive(false);
        String endFile = args[7];
        long endPos = Long.parseLong(args[8]);
        AtomicLong rows = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        client.registerEventListener(event -> {
            EventData data = event.getData();
            if (data instanceof WriteRowsEventData) {
                rows.addAndGet(((WriteRowsEventData) data).getRows().size());
            } else if (data instanceof UpdateRowsEventData) {
                rows.addAndGet(((UpdateRowsEventData) data).getRows().size());
            } else if (data instanceof DeleteRowsEventData) {
                rows.addAndGet(((DeleteRowsEventData) data).getRows().size());
            }
            if (event.getHeader() instanceof EventHeaderV4) {
                long next = ((EventHeaderV4) event.getHeader()).getNextPosition();
                int order = client.getBinlogFilename().compareTo(endFile);
                if (order > 0 || (order == 0 && next >= endPos)) {
                    done.countDown();
                }
            }
        });
        long started = System.nanoTime();
        client.connect(10_000);
        if (!done.await(1800, TimeUnit.SECONDS)) {
            System.err.println("BinlogReader: the end position was not reached in 30 minutes");
            System.exit(1);
        }
        long ended = System.nanoTime();
        client.disconnect();
        System.out.println("{\"rows\": " + rows.get() + ", \"seconds\": " + (ended - started) / 1e9 + "}");
    }
}
