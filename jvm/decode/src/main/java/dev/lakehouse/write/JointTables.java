package dev.lakehouse.write;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

import org.apache.spark.sql.execution.datasources.BasicWriteJobStatsTracker;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.WriteJobStatsTracker;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

import dev.lakehouse.reflect.Delta;

import scala.Option;

/**
 * The tables of one {@link MultiTableWrite}, each prepared on the driver as Delta's {@code
 * TransactionalWrite.writeFiles} prepares an append (a transaction started from the batch's
 * snapshot, its commit protocol, Spark's basic statistics tracker beside Delta's), then, after
 * the job, each table's staged commit actions ({@link StagedActions}).
 *
 * <p>A table is one call from Python ({@link #prepare}) where walking the same objects over
 * py4j took about fifteen round trips. Tables may be prepared from several threads at once, each
 * its own index. Delta's classes are reached by reflection (their public methods, as the Python
 * bridge called them), so this jar compiles against Spark alone.
 */
public final class JointTables {
  private final SerializableConfiguration shared;
  private final TableOutput[] outputs;
  private final Object[] txns;
  private final Object[] committers;
  private final Object[] stats;

  /**
   * @param tables how many tables (some may stay unprepared: their column is not written)
   * @param shared a Hadoop configuration the tables' outputs share (see {@link TableOutput})
   */
  public JointTables(int tables, SerializableConfiguration shared) {
    this.shared = shared;
    outputs = new TableOutput[tables];
    txns = new Object[tables];
    committers = new Object[tables];
    stats = new Object[tables];
  }

  /**
   * Prepare table {@code index}: a transaction of {@code log} started from {@code snapshot},
   * Spark's basic statistics tracker registered as the commit's operation metrics, the
   * transaction's commit protocol for {@code dataPath}, and the {@link TableOutput} the job's
   * tasks get.
   *
   * @param index the table's place in the write (its column of the input)
   * @param log the table's {@code DeltaLog}
   * @param snapshot the snapshot the batch read, which the transaction starts from
   * @param session the Spark session (Delta registers the commit's metrics with it)
   * @param factory the table's Parquet writer factory (its file format's {@code prepareWrite})
   * @param conf the Hadoop configuration the factory was prepared with
   * @param schema the rows' schema as Delta writes it (nullable)
   * @param deltaStats Delta's statistics tracker of the table, or null where it collects none
   * @param dataPath the table's data directory
   * @param eventTime the ordinal of the schema's event-time column, or -1
   */
  public void prepare(
      int index,
      Object log,
      Object snapshot,
      Object session,
      OutputWriterFactory factory,
      Configuration conf,
      StructType schema,
      WriteJobStatsTracker deltaStats,
      Path dataPath,
      int eventTime)
      throws ReflectiveOperationException {
    Object txn = Delta.method(log, "startTransaction", 2).invoke(log, Option.empty(), Option.apply(snapshot));
    BasicWriteJobStatsTracker history =
        new BasicWriteJobStatsTracker(shared, BasicWriteJobStatsTracker.metrics());
    Delta.method(txn, "registerSQLMetrics", 2).invoke(txn, session, history.driverSideMetrics());
    WriteJobStatsTracker[] trackers = deltaStats == null
        ? new WriteJobStatsTracker[] {history}
        : new WriteJobStatsTracker[] {deltaStats, history};
    Object committer = Delta.method(txn, "getCommitter", 1).invoke(txn, dataPath);
    TableOutput output = new TableOutput(
        (org.apache.spark.internal.io.FileCommitProtocol) committer,
        factory,
        conf,
        shared,
        schema,
        trackers,
        eventTime);
    synchronized (this) {
      txns[index] = txn;
      committers[index] = committer;
      stats[index] = deltaStats;
      outputs[index] = output;
    }
  }

  /** The tables' outputs, in index order (null where a table was not prepared). */
  public synchronized TableOutput[] outputs() {
    return outputs.clone();
  }

  /** Table {@code index}'s transaction. */
  public synchronized Object txn(int index) {
    return txns[index];
  }

  /**
   * Table {@code index}'s staged commit actions after the job ({@link StagedActions#make}).
   */
  public Object actions(int index, String appId, long version, long nowMillis)
      throws ReflectiveOperationException, java.io.IOException {
    Object txn;
    Object committer;
    Object tracker;
    synchronized (this) {
      txn = txns[index];
      committer = committers[index];
      tracker = stats[index];
    }
    return StagedActions.make(txn, committer, tracker, appId, version, nowMillis);
  }
}
