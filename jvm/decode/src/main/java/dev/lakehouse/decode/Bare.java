package dev.lakehouse.decode;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * A record without its Connect schema ({@code schemas.enable=false}): its JSON read as the
 * Python decoder reads it ({@code json} with exact numbers, the last of duplicate keys, no NaN),
 * its row image typed from its values as {@code lakehouse.cdc.schema.infer_row} types them. Only
 * what this code is sure to read the same way is read here; anything else is {@link
 * CanonicalReader#FAIL} and goes to the Python decoder:
 *
 * <ul>
 *   <li>text: valid UTF-8 (no byte order mark), no {@code &#92;ud}/{@code &#92;uD} in it (a
 *       surrogate's escape), no duplicate key, no number whose exponent has more than four
 *       digits;
 *   <li>an envelope whose fields have the types the Python decoder's models take (strictly: an
 *       integer for {@code ts_ms}, a string for {@code source.table}, ...), a row-change op with
 *       its row image, a known snapshot phase, an event time and a position it accepts;
 *   <li>row images and keys of scalars only (a string, a 64-bit integer, a finite number, a
 *       boolean, null), with printable ASCII column names Delta takes, none of them a lineage
 *       column's, no two alike but for case.
 * </ul>
 *
 * <p>The row image comes out typed, in the slot of its shape (its columns and their types)
 * when the specification names one, else as JSON text ({@code _row_json}) that Spark's {@code
 * from_json} reads into any column type exactly as it reads the Python decoder's text of the
 * same row; its columns ({@code _row_columns}) exactly as the Python decoder writes them.
 */
final class Bare {
  private static final JsonFactory JSON =
      JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();
  private static final int MAX_COLUMN_NAME = 255;
  private static final String BAD_NAME_CHARS = " ,;{}()\n\t=";

  private Bare() {}

  /** Any JSON value, as the Python decoder reads it (a float as its double). */
  private static Object read(JsonParser p, JsonToken t) throws IOException {
    switch (t) {
      case START_OBJECT:
        {
          Map<String, Object> out = new LinkedHashMap<>();
          for (JsonToken k = p.nextToken(); k == JsonToken.FIELD_NAME; k = p.nextToken()) {
            String name = p.currentName();
            Object v = read(p, p.nextToken());
            if (v == CanonicalReader.FAIL) {
              return v;
            }
            out.put(name, v);
          }
          return out;
        }
      case START_ARRAY:
        {
          List<Object> out = new ArrayList<>();
          for (JsonToken e = p.nextToken(); e != JsonToken.END_ARRAY; e = p.nextToken()) {
            Object v = read(p, e);
            if (v == CanonicalReader.FAIL) {
              return v;
            }
            out.add(v);
          }
          return out;
        }
      case VALUE_STRING:
        return p.getText();
      case VALUE_NUMBER_INT:
        if (p.getNumberType() == JsonParser.NumberType.BIG_INTEGER) {
          return new Unsure(); // a Python int: only a 64-bit one is read here
        }
        return p.getLongValue();
      case VALUE_NUMBER_FLOAT:
        {
          String text = p.getText();
          int e = Math.max(text.indexOf('e'), text.indexOf('E'));
          int digits = e < 0 ? 0 : text.length() - e - 1;
          if (digits > 0 && (text.charAt(e + 1) == '-' || text.charAt(e + 1) == '+')) {
            digits--;
          }
          if (digits > 4) {
            return CanonicalReader.FAIL; // Python's Decimal refuses some such exponents
          }
          double d = Double.parseDouble(text);
          return Double.isInfinite(d) ? new Unsure() : (Object) d;
        }
      case VALUE_TRUE:
        return Boolean.TRUE;
      case VALUE_FALSE:
        return Boolean.FALSE;
      case VALUE_NULL:
        return null;
      default:
        return CanonicalReader.FAIL;
    }
  }

  /** A value read that this code does not type (a big integer, an infinite float). */
  private static final class Unsure {}

  /** The text as a JSON document, or {@link CanonicalReader#FAIL}. */
  static Object document(byte[] text) {
    if (!validUtf8(text) || surrogateEscape(text)) {
      return CanonicalReader.FAIL;
    }
    try (JsonParser p = JSON.createParser(text)) {
      JsonToken first = p.nextToken();
      if (first == null) {
        return CanonicalReader.FAIL;
      }
      Object v = read(p, first);
      return p.nextToken() == null ? v : CanonicalReader.FAIL;
    } catch (IOException | RuntimeException e) {
      return CanonicalReader.FAIL; // malformed, too deep, too long: the Python decoder's words
    }
  }

  private static boolean surrogateEscape(byte[] b) {
    for (int i = 0; i + 2 < b.length; i++) {
      if (b[i] == '\\' && b[i + 1] == 'u' && (b[i + 2] == 'd' || b[i + 2] == 'D')) {
        return true;
      }
    }
    return false;
  }

  /** Strict UTF-8 (shortest forms, no surrogates), and no byte order mark. */
  static boolean validUtf8(byte[] b) {
    int n = b.length;
    if (n >= 3 && (b[0] & 0xFF) == 0xEF && (b[1] & 0xFF) == 0xBB && (b[2] & 0xFF) == 0xBF) {
      return false;
    }
    int i = 0;
    while (i < n) {
      int c = b[i] & 0xFF;
      if (c == 0) {
        return false; // never in JSON text, and it would make Jackson guess another encoding
      }
      if (c < 0x80) {
        i++;
        continue;
      }
      int cp = CanonicalReader.codePoint(b, i, n);
      if (cp < 0) {
        return false;
      }
      i += CanonicalReader.utf8Length(cp);
    }
    return true;
  }

  private static boolean isInt(Object v) {
    return v == null || v instanceof Long;
  }

  private static boolean isText(Object v) {
    return v == null || v instanceof String;
  }

  /** The models' field types, strictly: {@code int} (JSON integer), {@code str}, or either. */
  private static boolean fits(Map<String, Object> block, String[] ints, String[] texts) {
    for (String f : ints) {
      if (!isInt(block.get(f))) {
        return false;
      }
    }
    for (String f : texts) {
      if (!isText(block.get(f))) {
        return false;
      }
    }
    return true;
  }

  private static final String[] ENVELOPE_INTS = {"ts_ms", "ts_us", "ts_ns"};
  private static final String[] SOURCE_INTS = {
    "ts_ms", "ts_us", "ts_ns", "pos", "row", "server_id", "lsn", "xmin", "event_serial_no"
  };
  private static final String[] SOURCE_TEXTS = {
    "version", "connector", "name", "db", "schema", "table", "sequence", "file", "gtid",
    "change_lsn", "commit_lsn"
  };
  private static final String[] SOURCE_EITHER = {"txId", "scn", "commit_scn"};
  private static final String[] NONE = {};

  /** What the Python decoder's {@code infer_row} gives of an image, or null when unsure. */
  static final class Image {
    final String json;
    final String columns;
    /** The values, in the columns' order. */
    final Object[] values;

    Image(String json, String columns, Object[] values) {
      this.json = json;
      this.columns = columns;
      this.values = values;
    }
  }

  private static String spark(Object v) {
    if (v == null) {
      return "void";
    }
    if (v instanceof String) {
      return "string";
    }
    if (v instanceof Long) {
      return "bigint";
    }
    if (v instanceof Double) {
      return "double";
    }
    return v instanceof Boolean ? "boolean" : null;
  }

  /** A name Delta takes, written verbatim by Python's {@code json.dumps}. */
  private static boolean plainName(String name) {
    if (name.isEmpty() || name.length() > MAX_COLUMN_NAME) {
      return false;
    }
    for (int i = 0; i < name.length(); i++) {
      char c = name.charAt(i);
      if (c < 0x20 || c > 0x7E || c == '"' || c == '\\' || BAD_NAME_CHARS.indexOf(c) >= 0) {
        return false;
      }
    }
    return true;
  }

  /**
   * The image's JSON text and columns; null when a value is not a scalar, a name is not plain,
   * two names differ only in case, or one is {@code reserved} (case-folded); with {@code
   * namesOnly}, the columns are the names alone (as a key's are).
   */
  static Image image(Map<String, Object> row, Set<String> reserved, boolean namesOnly) {
    StringBuilder json = new StringBuilder(64).append('{');
    StringBuilder columns = new StringBuilder(64).append('[');
    Set<String> folded = new java.util.HashSet<>();
    boolean first = true;
    for (Map.Entry<String, Object> e : row.entrySet()) {
      String name = e.getKey();
      Object v = e.getValue();
      String type = spark(v);
      if (type == null || !plainName(name)) {
        return null;
      }
      String lower = name.toLowerCase(Locale.ROOT);
      if (!folded.add(lower) || reserved.contains(lower)) {
        return null;
      }
      if (!first) {
        json.append(',');
        columns.append(", ");
      }
      first = false;
      json.append(CanonicalReader.quoted(name)).append(':');
      if (v == null) {
        json.append("null");
      } else if (v instanceof String) {
        json.append(CanonicalReader.quoted((String) v));
      } else {
        json.append(v); // Long, Double (toString), Boolean
      }
      if (namesOnly) {
        columns.append('"').append(name).append('"');
      } else {
        columns.append("[\"").append(name).append("\", \"").append(type).append("\"]");
      }
    }
    return new Image(
        json.append('}').toString(), columns.append(']').toString(), row.values().toArray());
  }

  /**
   * The change event of a bare value, or null when this code does not read it (see the class
   * comment); {@code schemaTables}: the source tables whose records the Python decoder reads
   * with a Connect schema (none is inferred here).
   */
  @SuppressWarnings("unchecked")
  static ValueSchema.Decoded change(
      byte[] value,
      Set<String> schemaTables,
      Set<String> reserved,
      Set<String> phases,
      Map<String, Integer> shapes) {
    Object doc = document(value);
    if (!(doc instanceof Map)) {
      return null;
    }
    Map<String, Object> p = (Map<String, Object>) doc;
    Object op = p.get("op");
    if (!(op instanceof String)) {
      return null;
    }
    String o = (String) op;
    boolean rowOp = o.equals("r") || o.equals("c") || o.equals("u");
    boolean delete = o.equals("d");
    if (!rowOp && !delete && !o.equals("t")) {
      return null;
    }
    if (!fits(p, ENVELOPE_INTS, NONE)) {
      return null;
    }
    Object before = p.get("before");
    Object after = p.get("after");
    Object src = p.get("source");
    Object tx = p.get("transaction");
    if ((before != null && !(before instanceof Map))
        || (after != null && !(after instanceof Map))
        || (src != null && !(src instanceof Map))
        || (tx != null && !transaction(tx))) {
      return null;
    }
    Map<String, Object> source = (Map<String, Object>) src;
    ValueSchema.Decoded d = new ValueSchema.Decoded();
    d.op = o;
    d.snapshotPhase = "false";
    Long eventTime = (Long) p.get("ts_ms");
    if (source != null) {
      if (!fits(source, SOURCE_INTS, SOURCE_TEXTS)
          || source.containsKey("schema_name")
          || source.containsKey("tx_id")) {
        return null; // the model also takes these field names for schema and txId
      }
      for (String f : SOURCE_EITHER) {
        Object v = source.get(f);
        if (v != null && !(v instanceof String) && !(v instanceof Long)) {
          return null;
        }
      }
      Object snapshot = source.get("snapshot");
      if (snapshot instanceof Boolean) {
        d.snapshotPhase = ((Boolean) snapshot) ? "true" : "false";
      } else if (snapshot instanceof String && phases.contains(snapshot)) {
        d.snapshotPhase = (String) snapshot;
      } else if (snapshot != null) {
        return null;
      }
      if (source.get("ts_ms") != null) {
        eventTime = (Long) source.get("ts_ms");
      }
      if (!position(d, source)) {
        return null;
      }
      String table = (String) source.get("table");
      if (table == null && source.get("collection") instanceof String) {
        table = (String) source.get("collection");
      }
      if (table != null) {
        String qualifier = (String) source.get("schema");
        if (qualifier == null) {
          qualifier = (String) source.get("db");
        }
        d.sourceTable = qualifier == null ? table : qualifier + "." + table;
      }
    }
    if (d.sourceTable != null && schemaTables.contains(d.sourceTable)) {
      return null; // the Python decoder reads it with its table's Connect schema
    }
    if (eventTime != null
        && (eventTime < Conversion.MIN_MILLIS || eventTime > Conversion.MAX_MILLIS)) {
      return null;
    }
    d.eventTimeMs = eventTime;
    Map<String, Object> row = (Map<String, Object>) (rowOp ? after : delete ? before : null);
    if (rowOp && row == null) {
      return null; // missing_row_image, the Python decoder's to word
    }
    d.rowColumns = "[]";
    if (row != null) {
      Image image = image(row, reserved, false);
      if (image == null) {
        return null;
      }
      d.rowColumns = image.columns;
      Integer slot = shapes.get(image.columns);
      if (slot != null) { // a known shape: typed, as a record of a known schema is
        d.image = image.values;
        d.slot = slot;
      } else {
        d.rowJson = image.json;
      }
    }
    return d;
  }

  @SuppressWarnings("unchecked")
  private static boolean transaction(Object tx) {
    if (!(tx instanceof Map)) {
      return false;
    }
    Map<String, Object> t = (Map<String, Object>) tx;
    return t.get("id") instanceof String
        && isInt(t.get("total_order"))
        && isInt(t.get("data_collection_order"));
  }

  /** The connector position, as {@link ValueSchema} reads it from a typed source block. */
  private static boolean position(ValueSchema.Decoded d, Map<String, Object> source) {
    return ValueSchema.position(
        d,
        source.get("connector"),
        source.get("lsn"),
        source.get("file"),
        source.get("pos"),
        source.get("row"));
  }

  /** A bare key's image (names only as its columns), or null when this code does not read it. */
  @SuppressWarnings("unchecked")
  static Image key(byte[] key) {
    Object doc = document(key);
    if (!(doc instanceof Map)) {
      return null;
    }
    Map<String, Object> row = (Map<String, Object>) doc;
    boolean wrapper =
        row.containsKey("payload")
            && row.keySet().stream().allMatch(k -> k.equals("schema") || k.equals("payload"));
    if (wrapper) {
      return null; // a wrapper: a key schema this code does not know
    }
    return image(row, Set.of(), true);
  }
}
