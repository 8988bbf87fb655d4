package dev.lakehouse.write;

import java.io.Serializable;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.HashMap;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapred.JobConf;

import org.apache.spark.internal.io.FileCommitProtocol;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.WriteJobStatsTracker;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/**
 * One table's share of a {@link MultiTableWrite}: what Delta's own write of the table would
 * give Spark's file writer (its commit protocol, its Parquet writer factory prepared with the
 * table's options, its Hadoop configuration, its statistics trackers), and the table's schema.
 *
 * <p>Every member is made on the driver by Delta for this table's transaction; this class only
 * carries them to the tasks, as Spark's {@code WriteJobDescription} does.
 */
public final class TableOutput implements Serializable {
  private static final long serialVersionUID = 1L;

  final FileCommitProtocol committer;
  final OutputWriterFactory factory;
  /** A configuration the tables of a write share (serialised once with the job's tasks). */
  private final SerializableConfiguration shared;
  /** This table's configuration where it differs from {@link #shared}: set, or unset (null). */
  private final HashMap<String, String> changes;
  final StructType schema;
  final WriteJobStatsTracker[] trackers;
  /** The ordinal of the schema's event-time column (a timestamp), or -1. */
  final int eventTime;

  /**
   * @param conf the table's Hadoop configuration for its writers (after its file format's
   *     {@code prepareWrite})
   * @param shared a configuration shared by every table of the write (one table's, say): each
   *     output carries only what its own configuration changes of it
   */
  public TableOutput(
      FileCommitProtocol committer,
      OutputWriterFactory factory,
      Configuration conf,
      SerializableConfiguration shared,
      StructType schema,
      WriteJobStatsTracker[] trackers,
      int eventTime) {
    this.committer = committer;
    this.factory = factory;
    this.shared = shared;
    this.changes = new HashMap<>();
    Configuration base = shared.value();
    for (Map.Entry<String, String> entry : conf) {
      if (!entry.getValue().equals(base.getRaw(entry.getKey()))) {
        changes.put(entry.getKey(), entry.getValue());
      }
    }
    for (Map.Entry<String, String> entry : base) {
      if (conf.getRaw(entry.getKey()) == null) {
        changes.put(entry.getKey(), null);
      }
    }
    this.schema = schema;
    this.trackers = trackers.clone();
    for (WriteJobStatsTracker tracker : this.trackers) {
      share(tracker, shared);
    }
    this.eventTime = eventTime;
  }

  /**
   * Point each {@link SerializableConfiguration} field of {@code tracker} whose configuration
   * holds exactly what {@code shared}'s does at {@code shared} itself. Delta's statistics tracker
   * keeps a copy of its table's whole Hadoop configuration (about a thousand keys), which each
   * task of a write reads for each table; one object referenced by every table's tracker is
   * serialised, and read by a task, once. A tracker whose configuration differs in any key keeps
   * its own.
   */
  private static void share(WriteJobStatsTracker tracker, SerializableConfiguration shared) {
    for (Class<?> c = tracker.getClass(); c != null && c != Object.class; c = c.getSuperclass()) {
      for (Field field : c.getDeclaredFields()) {
        if (Modifier.isStatic(field.getModifiers())
            || field.getType() != SerializableConfiguration.class) {
          continue;
        }
        try {
          field.setAccessible(true);
          Object own = field.get(tracker);
          if (own != shared
              && own instanceof SerializableConfiguration
              && same(((SerializableConfiguration) own).value(), shared.value())) {
            field.set(tracker, shared);
          }
        } catch (ReflectiveOperationException | RuntimeException e) {
          // a field this JVM will not let us set: the tracker keeps its own copy, as before
        }
      }
    }
  }

  /** Whether two configurations hold the same keys with the same values. */
  private static boolean same(Configuration a, Configuration b) {
    if (a.size() != b.size()) {
      return false;
    }
    for (Map.Entry<String, String> entry : a) {
      if (!entry.getValue().equals(b.getRaw(entry.getKey()))) {
        return false;
      }
    }
    return true;
  }

  /**
   * A new copy of the table's configuration (a task's, to set its own keys in), a {@code
   * JobConf}: a Hadoop task context takes one as it is, and copies any other configuration
   * (about a thousand keys) again.
   */
  JobConf configuration() {
    JobConf conf = new JobConf(shared.value());
    for (Map.Entry<String, String> change : changes.entrySet()) {
      if (change.getValue() == null) {
        conf.unset(change.getKey());
      } else {
        conf.set(change.getKey(), change.getValue());
      }
    }
    return conf;
  }
}
