package dev.lakehouse.write;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeSet;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * An ingest batch's summary, aggregated by the task that writes the batch's rows: what
 * lakehouse's {@code summarise} computes as a Spark job of its own (a grouped aggregation of the
 * decoded records), here beside the write, per task, without a shuffle.
 *
 * <p>Each record is a struct of {@link #FIELDS} fields, in this order: the group, {@code _kind},
 * {@code _error_kind}, {@code _source_table}, {@code _snapshot_phase}, {@code _row_columns},
 * {@code _key_columns}, {@code topic} (strings) and {@code partition} (an int); then what is
 * aggregated per group: {@code _event_time_ms} (bigint), {@code offset} (bigint), {@code
 * timestamp} (a timestamp: epoch microseconds), {@code _seq} (string), {@code _connect_schema}
 * (string), the record's image group (string) and whether it kept its raw value (boolean).
 *
 * <p>Per group the task keeps what Spark's aggregate functions of {@code summarise} give, with
 * their rules for NULLs and order: {@code n} = {@code count(1)}, {@code max_ts} = {@code
 * max(_event_time_ms)}, {@code o} = {@code max(offset)}, {@code ts} = {@code
 * unix_millis(max(timestamp))}, {@code seq} = {@code max(_seq)} (strings in Spark's order: by
 * their UTF-8 bytes), {@code schema} = {@code max(struct(coalesce(_seq, ''), partition, offset,
 * _connect_schema))} over the records with a {@code _connect_schema}, {@code images} = {@code
 * collect_set} of the image group (NULL left out) and {@code kept} = {@code count_if} of the
 * kept flag. A group's values merge over tasks by the same functions, so the driver folds the
 * tasks' summaries as it folds the aggregation's rows.
 */
final class BatchSummary {
  /** The fields of a record's summary struct. */
  static final int FIELDS = 15;

  private static final int KEY_STRINGS = 7;
  private static final int PARTITION = 7;
  private static final int EVENT_TIME = 8;
  private static final int OFFSET = 9;
  private static final int TIMESTAMP = 10;
  private static final int SEQ = 11;
  private static final int CONNECT_SCHEMA = 12;
  private static final int IMAGE = 13;
  private static final int KEPT = 14;

  private static final ObjectMapper JSON = new ObjectMapper();

  /** A group's key: its seven strings (copied out of the row) and its partition. */
  private static final class Key {
    final UTF8String[] strings;
    final int partition;
    final int hash;

    Key(InternalRow record) {
      strings = new UTF8String[KEY_STRINGS];
      for (int i = 0; i < KEY_STRINGS; i++) {
        strings[i] = record.isNullAt(i) ? null : record.getUTF8String(i).clone();
      }
      partition = record.getInt(PARTITION);
      int h = partition;
      for (UTF8String s : strings) {
        h = 31 * h + (s == null ? 0 : s.hashCode());
      }
      hash = h;
    }

    /** Whether {@code record} is of this group (no copy made). */
    boolean holds(InternalRow record) {
      if (record.getInt(PARTITION) != partition) {
        return false;
      }
      for (int i = 0; i < KEY_STRINGS; i++) {
        boolean isNull = record.isNullAt(i);
        if (isNull != (strings[i] == null)) {
          return false;
        }
        if (!isNull && !strings[i].equals(record.getUTF8String(i))) {
          return false;
        }
      }
      return true;
    }

    @Override
    public boolean equals(Object other) {
      if (!(other instanceof Key)) {
        return false;
      }
      Key key = (Key) other;
      return partition == key.partition
          && hash == key.hash
          && java.util.Arrays.equals(strings, key.strings);
    }

    @Override
    public int hashCode() {
      return hash;
    }
  }

  /** A group's aggregates. */
  private static final class Group {
    long n;
    long maxEventTime;
    boolean hasEventTime;
    long maxOffset = Long.MIN_VALUE;
    long maxTimestamp;
    boolean hasTimestamp;
    UTF8String maxSeq;
    // the schema's struct: (coalesce(_seq, ''), partition, offset, _connect_schema)
    UTF8String schemaSeq;
    int schemaPartition;
    long schemaOffset;
    UTF8String schemaText;
    final TreeSet<String> images = new TreeSet<>();
    long kept;

    void add(InternalRow record, int partition) {
      n++;
      if (!record.isNullAt(EVENT_TIME)) {
        long t = record.getLong(EVENT_TIME);
        maxEventTime = hasEventTime ? Math.max(maxEventTime, t) : t;
        hasEventTime = true;
      }
      maxOffset = Math.max(maxOffset, record.getLong(OFFSET));
      if (!record.isNullAt(TIMESTAMP)) {
        long t = record.getLong(TIMESTAMP);
        maxTimestamp = hasTimestamp ? Math.max(maxTimestamp, t) : t;
        hasTimestamp = true;
      }
      UTF8String seq = record.isNullAt(SEQ) ? null : record.getUTF8String(SEQ);
      if (seq != null && (maxSeq == null || seq.compareTo(maxSeq) > 0)) {
        maxSeq = seq.clone();
      }
      if (!record.isNullAt(CONNECT_SCHEMA)) {
        UTF8String s = seq == null ? UTF8String.EMPTY_UTF8 : seq;
        long offset = record.getLong(OFFSET);
        UTF8String text = record.getUTF8String(CONNECT_SCHEMA);
        if (schemaSeq == null || laterSchema(s, partition, offset, text)) {
          schemaSeq = s.clone();
          schemaPartition = partition;
          schemaOffset = offset;
          schemaText = text.clone();
        }
      }
      if (!record.isNullAt(IMAGE)) {
        images.add(record.getUTF8String(IMAGE).toString());
      }
      if (record.getBoolean(KEPT)) {
        kept++;
      }
    }

    /** Whether the struct {@code (seq, partition, offset, text)} orders after the group's
     * schema struct, as Spark orders structs: field by field. */
    private boolean laterSchema(UTF8String seq, int partition, long offset, UTF8String text) {
      int c = seq.compareTo(schemaSeq);
      if (c == 0) {
        c = Integer.compare(partition, schemaPartition);
      }
      if (c == 0) {
        c = Long.compare(offset, schemaOffset);
      }
      if (c == 0) {
        c = text.compareTo(schemaText);
      }
      return c > 0;
    }
  }

  private static final String[] KEY_NAMES = {
    "_kind", "_error_kind", "_source_table", "_snapshot_phase", "_row_columns", "_key_columns",
    "topic"
  };

  private final HashMap<Key, Group> groups = new HashMap<>();
  /** The last record's group: a partition's records are mostly of one group in a row. */
  private Key lastKey;
  private Group lastGroup;

  /** Add one record (a struct of {@link #FIELDS} fields). */
  void add(InternalRow record) {
    if (lastKey == null || !lastKey.holds(record)) {
      Key key = new Key(record);
      lastGroup = groups.computeIfAbsent(key, k -> new Group());
      lastKey = key;
    }
    lastGroup.add(record, lastKey.partition);
  }

  boolean isEmpty() {
    return groups.isEmpty();
  }

  /** The groups as a JSON array of objects, one per group, named as {@code summarise}'s rows:
   * the key's columns, {@code n}, {@code max_ts}, {@code o}, {@code ts}, {@code seq}, {@code
   * schema} (an array: seq, partition, offset, text; or null), {@code images} and {@code kept}. */
  String toJson() {
    List<Map<String, Object>> rows = new ArrayList<>(groups.size());
    for (Map.Entry<Key, Group> entry : groups.entrySet()) {
      Key key = entry.getKey();
      Group g = entry.getValue();
      Map<String, Object> row = new LinkedHashMap<>();
      for (int i = 0; i < KEY_STRINGS; i++) {
        row.put(KEY_NAMES[i], Objects.toString(key.strings[i], null));
      }
      row.put("partition", key.partition);
      row.put("n", g.n);
      row.put("max_ts", g.hasEventTime ? g.maxEventTime : null);
      row.put("o", g.maxOffset);
      // unix_millis: microseconds to milliseconds, rounded down
      row.put("ts", g.hasTimestamp ? Math.floorDiv(g.maxTimestamp, 1000L) : null);
      row.put("seq", Objects.toString(g.maxSeq, null));
      if (g.schemaSeq == null) {
        row.put("schema", null);
      } else {
        List<Object> schema = new ArrayList<>(4);
        schema.add(g.schemaSeq.toString());
        schema.add(g.schemaPartition);
        schema.add(g.schemaOffset);
        schema.add(g.schemaText.toString());
        row.put("schema", schema);
      }
      row.put("images", new ArrayList<>(g.images));
      row.put("kept", g.kept);
      rows.add(row);
    }
    try {
      return JSON.writeValueAsString(rows);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("the batch summary could not be written as JSON", e);
    }
  }
}
