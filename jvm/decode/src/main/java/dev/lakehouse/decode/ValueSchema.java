package dev.lakehouse.decode;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.Set;

/**
 * A change event's envelope schema the decode knows (compiled in Python by {@code
 * lakehouse.cdc.wire.compile_value}), and the decode of one record of it: the rules of the
 * Python decoder for the common record, anything else not decoded here ({@link #decode} gives
 * null).
 */
final class ValueSchema implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final String NO_COLUMNS = "[]";

  final byte[] prefix;
  private final WireStruct payload;
  private final int before;
  private final int after;
  private final int source;
  private final int op;
  private final int envelopeTsMs;
  private final int transaction;
  private final int transactionId;

  private final ImagePlan afterPlan;
  private final ImagePlan beforePlan;
  private final boolean sameImages;
  /** Where the images go in the decoder's output row (the same slot when they share a type). */
  final int afterSlot;

  final int beforeSlot;

  // the source block's fields used, by position in the source struct (-1: absent)
  private final int connector;
  private final int table;
  private final int collection;
  private final int schema;
  private final int db;
  private final int sourceTsMs;
  private final int snapshot;
  private final boolean snapshotBoolean;
  private final int lsn;
  private final int file;
  private final int pos;
  private final int row;

  private final Set<String> snapshotPhases;
  /** The tables whose Connect schema at the start of the batch is this one. */
  private final Set<String> sameTables;

  private final String mark;

  ValueSchema(JsonNode spec, Set<String> snapshotPhases) {
    prefix = spec.path("prefix").asText().getBytes(StandardCharsets.UTF_8);
    payload = WireStruct.of(spec.path("payload"));
    before = payload.index("before");
    after = payload.index("after");
    source = payload.index("source");
    op = payload.index("op");
    envelopeTsMs = payload.index("ts_ms");
    transaction = spec.path("hasTransaction").asBoolean() ? payload.index("transaction") : -1;
    transactionId = transaction < 0 ? -1 : payload.nested[transaction].index("id");
    afterPlan = plan(spec.path("after"), after);
    beforePlan = plan(spec.path("before"), before);
    sameImages = spec.path("sameImages").asBoolean();
    afterSlot = spec.path("afterSlot").asInt(-1);
    beforeSlot = spec.path("beforeSlot").asInt(-1);
    WireStruct src = source < 0 ? null : payload.nested[source];
    connector = field(src, "connector", WireStruct.Type.STRING);
    table = field(src, "table", WireStruct.Type.STRING);
    int c = src == null ? -1 : src.index("collection");
    collection = c >= 0 && src.types[c] == WireStruct.Type.STRING ? c : -1;
    schema = field(src, "schema", WireStruct.Type.STRING);
    db = field(src, "db", WireStruct.Type.STRING);
    sourceTsMs = field(src, "ts_ms", null);
    snapshot = src == null ? -1 : src.index("snapshot");
    snapshotBoolean = snapshot >= 0 && src.types[snapshot] == WireStruct.Type.BOOLEAN;
    lsn = field(src, "lsn", null);
    file = field(src, "file", WireStruct.Type.STRING);
    pos = field(src, "pos", null);
    row = field(src, "row", null);
    if (op < 0 || payload.types[op] != WireStruct.Type.STRING) {
      throw new IllegalArgumentException("an envelope without a string op");
    }
    this.snapshotPhases = snapshotPhases;
    sameTables = new HashSet<>();
    spec.path("sameTables").forEach(t -> sameTables.add(t.asText()));
    mark = spec.path("mark").asText();
  }

  private ImagePlan plan(JsonNode spec, int field) {
    if (spec.isNull() || spec.isMissingNode()) {
      return null;
    }
    return ImagePlan.of(spec, payload.nested[field]);
  }

  /**
   * A source field's position, checked to be of the type the Python decoder's models take
   * ({@code null}: any integral type); -1 when the source block has no such field.
   */
  private static int field(WireStruct src, String name, WireStruct.Type type) {
    int i = src == null ? -1 : src.index(name);
    if (i < 0) {
      return -1;
    }
    boolean fits = type == null ? src.types[i].integral() : src.types[i] == type;
    if (!fits) {
      throw new IllegalArgumentException("source field " + name + " is " + src.types[i]);
    }
    return i;
  }

  /** What a record of this schema decodes to here. */
  static final class Decoded {
    String op;
    String sourceTable;
    String snapshotPhase;
    Long eventTimeMs;
    String seq;
    String rowColumns;
    String connectSchema;
    /** The image and the output slot it goes to (-1: none). */
    Object[] image;

    int slot = -1;
    /** The image as JSON text, for a record read without its schema ({@link Bare}). */
    String rowJson;
  }

  private static String pad(String digits) {
    int n = digits.length();
    if (n >= 20) {
      return digits.substring(0, 20); // as SQL's lpad cuts
    }
    return "0".repeat(20 - n) + digits;
  }

  /**
   * The record's fields, or null when it is not decoded here: its text is not canonical (see
   * {@link CanonicalReader}), or a rule of the Python decoder could differ (an op that is not a
   * row change, a missing image, a value that does not convert exactly, an unknown snapshot
   * phase, an event time out of range, a connector position the Python decoder refuses or
   * orders otherwise).
   */
  Decoded decode(byte[] value) {
    Object read = CanonicalReader.payload(value, prefix.length, payload);
    if (read == CanonicalReader.FAIL) {
      return null;
    }
    Object[] p = (Object[]) read;
    String o = (String) p[op];
    if (o == null) {
      return null;
    }
    boolean rowOp = o.equals("r") || o.equals("c") || o.equals("u");
    boolean delete = o.equals("d");
    if (!rowOp && !delete && !o.equals("t")) {
      return null;
    }
    Decoded d = new Decoded();
    d.op = o;
    if (!images(d, p, rowOp, delete)) {
      return null;
    }
    Object[] src = source < 0 ? null : (Object[]) p[source];
    if (src != null) {
      if (!position(d, src)) {
        return null;
      }
      String phase = "false";
      if (snapshot >= 0 && src[snapshot] != null) {
        if (snapshotBoolean) {
          phase = ((Boolean) src[snapshot]) ? "true" : "false";
        } else {
          phase = (String) src[snapshot];
          if (!snapshotPhases.contains(phase)) {
            return null;
          }
        }
      }
      d.snapshotPhase = phase;
    } else {
      d.snapshotPhase = "false";
    }
    Long eventTime = src == null || sourceTsMs < 0 ? null : (Long) src[sourceTsMs];
    if (eventTime == null && envelopeTsMs >= 0) {
      eventTime = (Long) p[envelopeTsMs];
    }
    if (eventTime != null
        && (eventTime < Conversion.MIN_MILLIS || eventTime > Conversion.MAX_MILLIS)) {
      return null;
    }
    d.eventTimeMs = eventTime;
    if (transaction >= 0 && p[transaction] != null) {
      Object[] tx = (Object[]) p[transaction];
      if (transactionId < 0 || tx[transactionId] == null) {
        return null;
      }
    }
    String t = text(src, table);
    if (t == null) {
      t = text(src, collection);
    }
    if (t != null) {
      String qualifier = text(src, schema);
      if (qualifier == null) {
        qualifier = text(src, db);
      }
      d.sourceTable = qualifier == null ? t : qualifier + "." + t;
      d.connectSchema = sameTables.contains(d.sourceTable) ? "" : mark;
    }
    return d;
  }

  private static String text(Object[] src, int i) {
    return src == null || i < 0 ? null : (String) src[i];
  }

  /** The row image a record carries, converted; false when it cannot be decoded here. */
  private boolean images(Decoded d, Object[] p, boolean rowOp, boolean delete) {
    d.rowColumns = NO_COLUMNS;
    if (sameImages && afterPlan != null) {
      Object[] chosen = (Object[]) p[delete ? before : after];
      if (rowOp && chosen == null) {
        return false;
      }
      if (!rowOp && !delete) {
        return true;
      }
      Object row = afterPlan.convert(chosen);
      if (row == CanonicalReader.FAIL) {
        return false;
      }
      d.image = (Object[]) row;
      d.slot = afterSlot;
      if (chosen != null) {
        d.rowColumns = afterPlan.rowColumns;
      }
      return true;
    }
    if (rowOp) {
      Object[] image = after < 0 ? null : (Object[]) p[after];
      if (afterPlan == null || image == null) {
        return false;
      }
      Object row = afterPlan.convert(image);
      if (row == CanonicalReader.FAIL) {
        return false;
      }
      d.image = (Object[]) row;
      d.slot = afterSlot;
      d.rowColumns = afterPlan.rowColumns;
      return true;
    }
    if (delete && beforePlan != null) {
      Object[] image = (Object[]) p[before];
      Object row = beforePlan.convert(image);
      if (row == CanonicalReader.FAIL) {
        return false;
      }
      d.image = (Object[]) row;
      d.slot = beforeSlot;
      if (image != null) {
        d.rowColumns = beforePlan.rowColumns;
      }
    }
    return true;
  }

  /** The connector position of a record of this schema (see {@link #position(Decoded, Object,
   * Object, Object, Object, Object)}). */
  private boolean position(Decoded d, Object[] src) {
    return position(
        d,
        connector < 0 ? null : src[connector],
        lsn < 0 ? null : src[lsn],
        file < 0 ? null : src[file],
        pos < 0 ? null : src[pos],
        row < 0 ? null : src[row]);
  }

  /**
   * The connector position ({@code lakehouse.cdc.seq.position_seq}) into {@code d.seq}:
   * PostgreSQL's LSN, MySQL's and MariaDB's binlog file number, position and row; none for
   * others. False where the Python decoder refuses the position or orders by one this code does
   * not read (SQL Server, Oracle). The values are a source block's, typed as the models type
   * them (a string connector and file, integral positions).
   */
  static boolean position(
      Decoded d, Object connector, Object lsn, Object file, Object pos, Object row) {
    String c = (String) connector;
    if (c == null) {
      return true;
    }
    switch (c) {
      case "postgresql":
        {
          Long l = (Long) lsn;
          if (l == null) {
            return true;
          }
          if (l < 0) {
            return false;
          }
          d.seq = pad(Long.toString(l));
          return true;
        }
      case "mysql":
      case "mariadb":
        {
          String f = (String) file;
          Long at = (Long) pos;
          if (f == null || at == null) {
            return true;
          }
          int k = f.length();
          while (k > 0 && f.charAt(k - 1) >= '0' && f.charAt(k - 1) <= '9') {
            k--;
          }
          if (k == f.length()) {
            return true; // no binlog number: no position, as in Python
          }
          Long r = (Long) row;
          long rowNumber = r == null ? 0 : r;
          BigDecimal number = new BigDecimal(f.substring(k));
          if (number.precision() > 20 || at < 0 || rowNumber < 0) {
            return false;
          }
          d.seq =
              pad(number.toPlainString())
                  + "."
                  + pad(Long.toString(at))
                  + "."
                  + pad(Long.toString(rowNumber));
          return true;
        }
      case "sqlserver":
      case "oracle":
        return false;
      default:
        return true;
    }
  }
}
