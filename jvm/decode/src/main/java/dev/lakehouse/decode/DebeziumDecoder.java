package dev.lakehouse.decode;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;

/**
 * The JVM half of lakehouse's Debezium decode: a Java UDF of a record's raw {@code (key,
 * value)} bytes, evaluated in Spark's executors, no Python per record.
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
 * then those of the key schemas; Python gives its Spark type.
 */
public final class DebeziumDecoder implements UDF2<byte[], byte[], Row> {
  private static final long serialVersionUID = 1L;

  /** The version of the specification this class reads (checked by lakehouse's Python side). */
  public static final int PROTOCOL = 1;

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

  private final String specText;
  private transient Compiled compiled;

  /** A decoder of the specification {@code spec} (JSON text). */
  public DebeziumDecoder(String spec) {
    this.specText = spec;
    this.compiled = new Compiled(spec); // checked on the driver, not first in a task
  }

  /**
   * The decoder of {@code spec} as a Spark function of {@code (key, value)}, returning the
   * type {@code returnType} (Spark's JSON form, made with the specification). A static factory,
   * so that the Java UDF overload is chosen here, at compile time.
   */
  public static UserDefinedFunction function(String spec, String returnType) {
    UDF2<byte[], byte[], Row> decoder = new DebeziumDecoder(spec);
    return functions.udf(decoder, DataType.fromJson(returnType));
  }

  /** The compiled specification; built again in each task from the text that travels. */
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

  @Override
  public Row call(byte[] key, byte[] value) {
    Compiled c = compiled;
    if (c == null) {
      c = compiled = new Compiled(specText);
    }
    Object[] out = new Object[c.width];
    if (value == null || value.length == 0) {
      out[0] = "tombstone";
      return RowFactory.create(out);
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
    if (d == null || !key(c, key, out)) {
      return RowFactory.create(out); // left to the Python decoder, key and value
    }
    out[0] = "change";
    out[1] = d.op;
    out[2] = d.sourceTable;
    out[3] = d.snapshotPhase;
    out[4] = d.eventTimeMs;
    out[5] = d.seq;
    out[6] = d.rowColumns;
    out[8] = d.connectSchema;
    out[9] = d.rowJson;
    out[11] = bare;
    if (d.slot >= 0 && d.image != null) {
      out[d.slot] = RowFactory.create(d.image);
    }
    return RowFactory.create(out);
  }

  /**
   * The record's key into {@code out} ({@code _key_columns}, and its typed image in its key
   * schema's slot or its {@code _key_json}); false when the Python decoder is to read it (a key
   * of a schema not known, or one this code is not sure to read alike).
   */
  private static boolean key(Compiled c, byte[] key, Object[] out) {
    out[7] = "[]";
    if (key == null || key.length == 0 || key.length > c.maxBytes) {
      return true;
    }
    int j = c.keyIndex.find(key);
    if (j >= 0) {
      Object[] k = c.keys[j].decode(key);
      if (k == null) {
        return false;
      }
      out[c.keys[j].slot] = RowFactory.create(k);
      out[7] = c.keys[j].keyColumns();
      return true;
    }
    if (wrapped(key)) {
      return false;
    }
    Bare.Image k = Bare.key(key);
    if (k == null) {
      return false;
    }
    out[7] = k.columns;
    out[10] = k.json;
    return true;
  }
}
