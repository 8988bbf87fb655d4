package dev.lakehouse.decode;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.classic.ExpressionColumnNode$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The JVM half of lakehouse's Debezium decode: a record's raw {@code (key, value)} bytes decoded
 * into Spark's own row, in Spark's executors, no Python per record. Spark calls it through
 * {@link DecodeExpression}, a Catalyst expression ({@link #column}).
 *
 * <p>It decodes a change event whose value (and key) starts with the prefix of a known Connect
 * schema, {@code {"schema":S,"payload":}, exactly as {@code JsonConverter} writes it, and whose
 * payload is in the canonical form ({@link CanonicalReader}), with every value converting
 * exactly. Every other record it leaves to the Python decoder, in the same batch: its output
 * then has a null {@code _kind} (or {@code "tombstone"} for an empty value), and the Python
 * decoder decides its kind, its dead-letter reason, its schema.
 *
 * <p>The specification (JSON, made by {@code lakehouse.dimension.jvm_decode}) lists the known
 * schemas, compiled in Python: the rules of what is decodable and how live there, once. The
 * output row has the fields {@link #FIELDS}, then the typed row-image slots of the value schemas,
 * then those of the key schemas; Python gives its Spark type, and each value is put in the row as
 * Spark holds a value of its field's type ({@link Internal}).
 */
public final class DebeziumDecoder {
  /** The version of the specification this class reads (checked by lakehouse's Python side). */
  public static final int PROTOCOL = 2;

  /** The decoded fields, in the output row's order, before the image slots. */
  public static final String[] FIELDS = {
    "_kind",
    "_op",
    "_source_table",
    "_snapshot_phase",
    "_event_time_ms",
    "_seq",
    "_row_columns",
    "_key_columns",
    "_connect_schema",
    "_row_json",
    "_key_json",
    "_bare"
  };

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final UTF8String TOMBSTONE = UTF8String.fromString("tombstone");
  private static final UTF8String CHANGE = UTF8String.fromString("change");
  private static final UTF8String NO_KEY_COLUMNS = UTF8String.fromString("[]");

  private final Compiled c;
  /** Per output slot, how its image's values are held; null for a field of {@link #FIELDS}. */
  private final Internal[] slots;

  /** How many decoders a JVM keeps ({@link #of}): a pipeline's specification changes only as
   * its decoder learns a schema, and a JVM runs a few pipelines at most. */
  private static final int KEPT = 8;

  /** The decoders last asked for, by specification and type ({@link #of}). */
  private static final Map<String, DebeziumDecoder> kept =
      new LinkedHashMap<>(KEPT, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, DebeziumDecoder> eldest) {
          return size() > KEPT;
        }
      };

  /**
   * The decoder of {@code spec} returning rows of {@code type} ({@code typeText}, its JSON), as
   * {@link #DebeziumDecoder(String, DataType)} makes it, kept for the JVM's later tasks: a
   * specification of many tables' schemas costs more to compile than a task of a few records
   * costs to decode, and every task of every batch reads the same one until the decoder learns
   * a schema. A decoder holds nothing between records, so tasks on several threads share it.
   */
  static DebeziumDecoder of(String spec, String typeText, DataType type) {
    String key = typeText + '\n' + spec;
    synchronized (kept) {
      DebeziumDecoder d = kept.get(key);
      if (d != null) {
        return d;
      }
    }
    DebeziumDecoder d = new DebeziumDecoder(spec, type);
    synchronized (kept) {
      kept.put(key, d);
    }
    return d;
  }

  /** A decoder of the specification {@code spec} (JSON text) returning rows of {@code type}. */
  DebeziumDecoder(String spec, DataType type) {
    c = new Compiled(spec);
    StructField[] fields = ((StructType) type).fields();
    if (fields.length != c.width) {
      throw new IllegalArgumentException(
          "a decode specification of " + c.width + " output fields, typed with " + fields.length);
    }
    slots = new Internal[fields.length];
    for (int i = FIELDS.length; i < fields.length; i++) {
      slots[i] = Internal.of((StructType) fields[i].dataType());
    }
  }

  /**
   * The decode of the columns {@code key} and {@code value} (binary) by the specification
   * {@code spec}, returning {@code returnType} (Spark's JSON form, made with the specification):
   * a column of {@link DecodeExpression}, its specification compiled here, on the driver.
   */
  public static Column column(String spec, String returnType) {
    DecodeExpression decode =
        new DecodeExpression(
                UnresolvedAttribute.quoted("key"),
                UnresolvedAttribute.quoted("value"),
                spec,
                returnType)
            .checked();
    return new Column(ExpressionColumnNode$.MODULE$.apply(decode));
  }

  /** The compiled specification (a JVM compiles each once, {@link #of}). */
  private static final class Compiled {
    final long maxBytes;
    final ValueSchema[] values;
    final KeySchema[] keys;
    final PrefixIndex valueIndex;
    final PrefixIndex keyIndex;
    final int width;
    /** Records without a schema are read here (the tables below aside). */
    final boolean bare;
    /** Tables whose records the Python decoder reads with a Connect schema. */
    final Set<String> schemaTables = new HashSet<>();
    /** The build table's own column names, case-folded: no row image may have one. */
    final Set<String> reserved = new HashSet<>();

    final Set<String> phases = new HashSet<>();
    /** Row images without a schema typed in a slot of their own: by their columns' text. */
    final java.util.Map<String, Integer> shapes = new java.util.HashMap<>();

    Compiled(String text) {
      JsonNode spec;
      try {
        spec = JSON.readTree(text);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      if (spec.path("protocol").asInt() != PROTOCOL) {
        throw new IllegalArgumentException(
            "a decode specification of protocol " + spec.path("protocol") + ", not " + PROTOCOL);
      }
      maxBytes = spec.path("maxBytes").asLong();
      spec.path("snapshotPhases").forEach(p -> phases.add(p.asText()));
      bare = spec.path("bare").asBoolean();
      spec.path("schemaTables").forEach(p -> schemaTables.add(p.asText()));
      spec.path("reserved").forEach(p -> reserved.add(p.asText()));
      spec.path("bareShapes")
          .forEach(s -> shapes.put(s.path("rowColumns").asText(), s.path("slot").asInt()));
      JsonNode v = spec.path("values");
      values = new ValueSchema[v.size()];
      List<byte[]> valuePrefixes = new ArrayList<>();
      for (int i = 0; i < values.length; i++) {
        values[i] = new ValueSchema(v.get(i), phases);
        valuePrefixes.add(values[i].prefix);
      }
      JsonNode k = spec.path("keys");
      keys = new KeySchema[k.size()];
      List<byte[]> keyPrefixes = new ArrayList<>();
      for (int i = 0; i < keys.length; i++) {
        keys[i] = new KeySchema(k.get(i));
        keyPrefixes.add(keys[i].prefix);
      }
      valueIndex = new PrefixIndex(valuePrefixes);
      keyIndex = new PrefixIndex(keyPrefixes);
      width = FIELDS.length + spec.path("slots").asInt();
    }
  }

  private static final byte[] WRAPPED = {'{', '"', 's', 'c', 'h', 'e', 'm', 'a', '"', ':'};

  private static boolean wrapped(byte[] text) {
    return text.length > WRAPPED.length
        && java.util.Arrays.equals(text, 0, WRAPPED.length, WRAPPED, 0, WRAPPED.length);
  }

  /** The decoder's output row of one record. */
  InternalRow decode(byte[] key, byte[] value) {
    Object[] out = new Object[c.width];
    if (value == null || value.length == 0) {
      out[0] = TOMBSTONE;
      return new GenericInternalRow(out);
    }
    ValueSchema.Decoded d = null;
    boolean bare = false;
    if (value.length <= c.maxBytes) {
      int i = c.valueIndex.find(value);
      if (i >= 0) {
        d = c.values[i].decode(value);
      } else if (c.bare && !wrapped(value)) {
        d = Bare.change(value, c.schemaTables, c.reserved, c.phases, c.shapes);
        bare = true;
      }
    }
    if (d == null || !key(key, out)) {
      return new GenericInternalRow(out); // left to the Python decoder, key and value
    }
    out[0] = CHANGE;
    out[1] = UTF8String.fromString(d.op);
    out[2] = UTF8String.fromString(d.sourceTable);
    out[3] = UTF8String.fromString(d.snapshotPhase);
    out[4] = d.eventTimeMs;
    out[5] = UTF8String.fromString(d.seq);
    out[6] = UTF8String.fromString(d.rowColumns);
    out[8] = UTF8String.fromString(d.connectSchema);
    out[9] = UTF8String.fromString(d.rowJson);
    out[11] = bare;
    if (d.slot >= 0 && d.image != null) {
      out[d.slot] = slots[d.slot].row(d.image);
    }
    return new GenericInternalRow(out);
  }

  /**
   * The record's key into {@code out} ({@code _key_columns}, and its typed image in its key
   * schema's slot or its {@code _key_json}); false when the Python decoder is to read it (a key
   * of a schema not known, or one this code is not sure to read alike).
   */
  private boolean key(byte[] key, Object[] out) {
    out[7] = NO_KEY_COLUMNS;
    if (key == null || key.length == 0 || key.length > c.maxBytes) {
      return true;
    }
    int j = c.keyIndex.find(key);
    if (j >= 0) {
      Object[] k = c.keys[j].decode(key);
      if (k == null) {
        return false;
      }
      out[c.keys[j].slot] = slots[c.keys[j].slot].row(k);
      out[7] = UTF8String.fromString(c.keys[j].keyColumns());
      return true;
    }
    if (wrapped(key)) {
      return false;
    }
    Bare.Image k = Bare.key(key);
    if (k == null) {
      return false;
    }
    out[7] = UTF8String.fromString(k.columns);
    out[10] = UTF8String.fromString(k.json);
    return true;
  }
}
