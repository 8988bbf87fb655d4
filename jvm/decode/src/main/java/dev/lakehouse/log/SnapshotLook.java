package dev.lakehouse.log;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;

import dev.lakehouse.reflect.Delta;

/**
 * What a look at a Delta table reads of a snapshot, in one call each from Python: the
 * snapshot's version, log location, {@code metaData} action and the commit files its log
 * segment lists ({@link #describe}), and the text of one commit file ({@link #read}).
 *
 * <p>Over py4j each of these is a walk of Scala objects, a round trip per method and a JVM
 * object for Python to release per result: about twenty round trips per table and batch for
 * what is here two. Delta's classes are reached by reflection (their public methods, as the
 * Python bridge called them), so this jar compiles against Spark alone and runs with each
 * delta-spark this lakehouse supports.
 */
public final class SnapshotLook {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** A commit file's name: its version, and a staged commit's unique part. */
  private static final Pattern COMMIT_FILE = Pattern.compile("(\\d{20})(?:\\.[0-9a-fA-F-]+)?\\.json$");

  private SnapshotLook() {}

  /**
   * The snapshot as JSON: {@code version}; {@code logPath}, the table's {@code _delta_log};
   * {@code metaData}, the snapshot's {@code metaData} action as the log writes it (null before
   * the table's first commit); and {@code commits}, each commit file its log segment lists (the
   * commits since its checkpoint, staged ones included) as {@code [version, length,
   * modification time]}, in the segment's order.
   *
   * @param snapshot a {@code org.apache.spark.sql.delta.Snapshot}
   */
  public static String describe(Object snapshot) throws ReflectiveOperationException, IOException {
    ObjectNode out = JSON.createObjectNode();
    long version = ((Number) Delta.call(snapshot, "version")).longValue();
    out.put("version", version);
    out.put("logPath", Delta.call(Delta.call(snapshot, "deltaLog"), "logPath").toString());
    if (version >= 0) {
      out.set("metaData", JSON.readTree((String) Delta.call(Delta.call(snapshot, "metadata"), "json")).get("metaData"));
    } else {
      out.putNull("metaData");
    }
    ArrayNode commits = out.putArray("commits");
    scala.collection.Iterator<?> deltas = deltas(snapshot).iterator();
    while (deltas.hasNext()) {
      FileStatus status = (FileStatus) deltas.next();
      long found = commitVersion(status.getPath());
      if (found >= 0) {
        commits.addArray().add(found).add(status.getLen()).add(status.getModificationTime());
      }
    }
    return JSON.writeValueAsString(out);
  }

  /**
   * The text of the commit that created {@code version} (its JSON lines, joined by newlines),
   * read through the table's {@code LogStore} as Delta reads it: the file the snapshot's log
   * segment lists for it, or else the backfilled {@code _delta_log/<version>.json}. Null when
   * the log no longer has the file.
   *
   * @param log the table's {@code DeltaLog}
   * @param snapshot a snapshot of it (null: the backfilled file)
   */
  public static String read(Object log, Object snapshot, long version)
      throws ReflectiveOperationException, IOException {
    FileStatus listed = snapshot == null ? null : listed(snapshot, version);
    Object store = Delta.call(log, "store");
    Configuration conf = (Configuration) Delta.call(log, "newDeltaHadoopConf");
    Object lines;
    try {
      if (listed != null) {
        lines = store.getClass().getMethod("read", FileStatus.class, Configuration.class)
            .invoke(store, listed, conf);
      } else {
        Path path = new Path((Path) Delta.call(log, "logPath"), String.format("%020d.json", version));
        lines = store.getClass().getMethod("read", Path.class, Configuration.class)
            .invoke(store, path, conf);
      }
    } catch (InvocationTargetException e) {
      if (e.getCause() instanceof FileNotFoundException) {
        return null;
      }
      throw e;
    }
    return ((scala.collection.IterableOnceOps<?, ?, ?>) lines).mkString("\n");
  }

  /** The commit file of {@code version} the snapshot's log segment lists, or null. */
  private static FileStatus listed(Object snapshot, long version)
      throws ReflectiveOperationException {
    scala.collection.Seq<?> deltas = deltas(snapshot);
    long last = ((Number) Delta.call(snapshot, "version")).longValue();
    // a segment's commits are consecutive versions ending at the snapshot's
    int index = deltas.size() - 1 - (int) (last - version);
    if (index >= 0 && index < deltas.size()) {
      FileStatus status = (FileStatus) deltas.apply(index);
      if (commitVersion(status.getPath()) == version) {
        return status;
      }
    }
    scala.collection.Iterator<?> all = deltas.iterator();
    while (all.hasNext()) {
      FileStatus status = (FileStatus) all.next();
      if (commitVersion(status.getPath()) == version) {
        return status;
      }
    }
    return null;
  }

  private static scala.collection.Seq<?> deltas(Object snapshot)
      throws ReflectiveOperationException {
    return (scala.collection.Seq<?>) Delta.call(Delta.call(snapshot, "logSegment"), "deltas");
  }

  /** The version a commit file holds by its name; -1 for a file not named as a commit. */
  private static long commitVersion(Path path) {
    Matcher m = COMMIT_FILE.matcher(path.getName());
    return m.find() ? Long.parseLong(m.group(1)) : -1;
  }
}
