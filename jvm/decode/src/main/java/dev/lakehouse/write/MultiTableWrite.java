package dev.lakehouse.write;

import java.text.SimpleDateFormat;
import java.util.ArrayList;
import java.util.Date;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.internal.io.FileCommitProtocol.TaskCommitMessage;
import org.apache.spark.internal.io.FileNameSpec;
import org.apache.spark.rdd.RDD;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.WriteTaskStats;
import org.apache.spark.sql.execution.datasources.WriteTaskStatsTracker;
import org.apache.spark.sql.internal.ReadOnlySQLConf;
import org.apache.spark.sql.internal.SQLConf;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The data files of many tables written by one Spark job: each task writes each table's rows
 * of its partition to a file of that table, with the table's own Parquet writer, commit
 * protocol and statistics trackers, as Spark's {@code FileFormatWriter} does for one table
 * ({@code SingleDirectoryDataWriter}: one file per task, no rolling).
 *
 * <p>The input's column {@code i} is table {@code i}'s row (a struct of the table's schema) or
 * null: a row of the input holds a row for each table whose column is not null (a record can
 * make rows of several tables). The input is read in at most a given number of tasks, so a
 * table gets at most that many files. Nothing is committed to any table: the driver gets
 * each table's task commit messages and statistics back ({@link #write}), and the caller commits
 * each table's files in a transaction of its own. A task that fails deletes the files it opened;
 * a job that fails leaves the files of its finished tasks, which no table version names.
 *
 * <p>The input may carry one more column, after the tables' columns: a struct of a {@link
 * BatchSummary}'s fields, which every row has. Each task then also aggregates its rows' summary,
 * and the job returns the tasks' summaries beside what they wrote: an ingest batch decoded,
 * written and summarised in one pass over its records.
 */
public final class MultiTableWrite implements FlatMapFunction<Iterator<InternalRow>, TaskOutput> {
  private static final long serialVersionUID = 1L;

  /** Spark's choice between generated and interpreted expressions ({@code SQLConf}). */
  private static final String FACTORY_MODE = "spark.sql.codegen.factoryMode";

  private final TableOutput[] tables;
  private final String jobTrackerId;
  /** Whether the input's column after the tables' is a {@link BatchSummary} struct. */
  private final boolean summarise;
  /** Whether each table's rows are few: its Parquet writer's buffers start small. */
  private final boolean few;

  private MultiTableWrite(
      TableOutput[] tables, String jobTrackerId, boolean summarise, boolean few) {
    this.tables = tables;
    this.jobTrackerId = jobTrackerId;
    this.summarise = summarise;
    this.few = few;
  }

  /** Parquet's page size setting, which also sizes a writer's compression buffer. */
  private static final String PAGE_SIZE = "parquet.page.size";

  /**
   * The page size of a writer of few rows, where the configuration leaves it unset: Parquet
   * allocates a compression buffer of a page's size for each file it opens (1 MiB by default),
   * an object the JVM's G1 collector places in regions of its own (a "humongous" object: at
   * least half a region, and regions are 1 MiB and up) and which starts its collections. A
   * file of a few rows fills at most a few pages of either size.
   */
  private static final int FEW_ROWS_PAGE_SIZE = 64 * 1024;

  /** One table's open file in a task. */
  private static final class Open {
    final TaskAttemptContext context;
    final String path;
    final OutputWriter writer;
    final WriteTaskStatsTracker[] stats;
    long rows;
    long maxEventTime = Long.MIN_VALUE;
    boolean hasEventTime;

    Open(TaskAttemptContext context, String path, OutputWriter writer, WriteTaskStatsTracker[] stats) {
      this.context = context;
      this.path = path;
      this.writer = writer;
      this.stats = stats;
    }
  }

  /**
   * The task's rows written, under one {@code SQLConf} made from the task's properties for the
   * whole task. Without it, every {@code SQLConf.get} in a task makes a new one, copying each of
   * the task's properties (the session's SQL settings, which a SQL execution hands its tasks):
   * interpreted evaluation asks for it at each field of each row it reads (Spark's {@code
   * PhysicalDataType}), and Delta's statistics tracker at each expression it prepares. This is
   * what Spark's own {@code SQLExecutionRDD} does for a plan executed outside a SQL execution.
   */
  @Override
  public Iterator<TaskOutput> call(Iterator<InternalRow> rows) throws Exception {
    TaskContext task = TaskContext.get();
    // a Scala function may not throw a checked exception: it is carried out and thrown here
    Exception[] failed = new Exception[1];
    Iterator<TaskOutput> written =
        SQLConf.withExistingConf(
            new ReadOnlySQLConf(task),
            () -> {
              try {
                return write(rows, task);
              } catch (Exception e) {
                failed[0] = e;
                return null;
              }
            });
    if (failed[0] != null) {
      throw failed[0];
    }
    return written;
  }

  private Iterator<TaskOutput> write(Iterator<InternalRow> rows, TaskContext task)
      throws Exception {
    JobID job = new JobID(jobTrackerId, task.stageId());
    TaskAttemptID attempt =
        new TaskAttemptID(new TaskID(job, TaskType.MAP, task.partitionId()), task.attemptNumber());
    Open[] open = new Open[tables.length];
    List<TaskOutput> out = new ArrayList<>();
    BatchSummary summary = summarise ? new BatchSummary() : null;
    try {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        if (summary != null) {
          summary.add(row.getStruct(tables.length, BatchSummary.FIELDS));
        }
        for (int t = 0; t < tables.length; t++) {
          TableOutput table = tables[t];
          if (table == null || row.isNullAt(t)) {
            continue;
          }
          Open file = open[t];
          if (file == null) {
            file = open[t] = open(table, job, attempt);
          }
          InternalRow value = row.getStruct(t, table.schema.size());
          file.writer.write(value);
          for (WriteTaskStatsTracker s : file.stats) {
            s.newRow(file.path, value);
          }
          file.rows++;
          if (table.eventTime >= 0 && !value.isNullAt(table.eventTime)) {
            file.maxEventTime = Math.max(file.maxEventTime, value.getLong(table.eventTime));
            file.hasEventTime = true;
          }
        }
      }
      for (int t = 0; t < open.length; t++) {
        Open file = open[t];
        if (file == null) {
          continue;
        }
        file.writer.close();
        for (WriteTaskStatsTracker s : file.stats) {
          s.closeFile(file.path);
        }
        long started = System.currentTimeMillis();
        TaskCommitMessage message = tables[t].committer.commitTask(file.context);
        long took = System.currentTimeMillis() - started;
        WriteTaskStats[] stats = new WriteTaskStats[file.stats.length];
        for (int k = 0; k < stats.length; k++) {
          stats[k] = file.stats[k].getFinalStats(took);
        }
        out.add(new TaskOutput(t, message, stats, file.rows, file.maxEventTime, file.hasEventTime));
      }
      if (summary != null && !summary.isEmpty()) {
        out.add(new TaskOutput(summary.toJson()));
      }
    } catch (Throwable e) {
      abort(open);
      throw e;
    }
    return out.iterator();
  }

  private Open open(TableOutput table, JobID job, TaskAttemptID attempt) throws Exception {
    // as Spark's FileFormatWriter.executeTask sets up a task's Hadoop context
    Configuration conf = table.configuration();
    conf.set("mapreduce.job.id", job.toString());
    conf.set("mapreduce.task.id", attempt.getTaskID().toString());
    conf.set("mapreduce.task.attempt.id", attempt.toString());
    conf.setBoolean("mapreduce.task.ismap", true);
    conf.setInt("mapreduce.task.partition", 0);
    if (few && conf.get(PAGE_SIZE) == null) {
      conf.setInt(PAGE_SIZE, FEW_ROWS_PAGE_SIZE);
    }
    TaskAttemptContext context = new TaskAttemptContextImpl(conf, attempt);
    table.committer.setupTask(context);
    String ext = "-c000" + table.factory.getFileExtension(context);
    String path = table.committer.newTaskTempFile(context, Option.empty(), new FileNameSpec("", ext));
    WriteTaskStatsTracker[] stats = new WriteTaskStatsTracker[table.trackers.length];
    for (int k = 0; k < stats.length; k++) {
      stats[k] = table.trackers[k].newTaskInstance();
    }
    OutputWriter writer = table.factory.newInstance(path, table.schema, context);
    for (WriteTaskStatsTracker s : stats) {
      s.newFile(path);
    }
    return new Open(context, path, writer, stats);
  }

  private void abort(Open[] open) {
    for (int t = 0; t < open.length; t++) {
      Open file = open[t];
      if (file == null) {
        continue;
      }
      try {
        file.writer.close();
      } catch (Throwable ignored) {
        // the file is deleted next; its writer's state no longer matters
      }
      try {
        tables[t].committer.abortTask(file.context);
        Path path = new Path(file.path);
        path.getFileSystem(file.context.getConfiguration()).delete(path, false);
      } catch (Throwable ignored) {
        // an unreferenced file is VACUUM's; the task's own failure is the one to report
      }
    }
  }

  /** What the job wrote of one table. */
  public static final class Written {
    private final long rows;
    private final long maxEventTime;
    private final boolean hasEventTime;

    Written(long rows, long maxEventTime, boolean hasEventTime) {
      this.rows = rows;
      this.maxEventTime = maxEventTime;
      this.hasEventTime = hasEventTime;
    }

    /** The rows written. */
    public long rows() {
      return rows;
    }

    /** The largest event time written, in epoch milliseconds (Spark's {@code unix_millis}),
     * or null when no row has one. */
    public Long maxEventTimeMillis() {
      return hasEventTime ? Math.floorDiv(maxEventTime, 1000L) : null;
    }
  }

  /**
   * Write each table's rows of {@code query}'s result (laid out as this class's comment says; a
   * null output: that column is not written) in one job of at most {@code tasks} tasks, then
   * hand each table's task results to its commit protocol ({@code commitJob}) and its statistics
   * trackers ({@code processStats}), as Spark's {@code FileFormatWriter} does at a job's end:
   * afterwards a Delta table's commit protocol lists the files' {@code AddFile} actions and its
   * statistics tracker their statistics. Nothing is committed to any table.
   *
   * <p>{@code interpreted}: the job's tasks evaluate Spark's projections and predicates (the
   * query's, the statistics trackers') interpreted, not as generated code. Spark generates a
   * projection's code in every task that makes one, per table for the trackers: for a write of
   * many tables of few rows, generating code costs more than the rows it would speed up. The
   * two evaluate the same expressions to the same values. Spark's {@code
   * spark.sql.codegen.factoryMode} is set for this job's tasks only, as a local property of the
   * calling thread, beside the session's SQL settings (as Spark's own SQL executions hand them
   * to their tasks); the query's plan is executed without {@code QueryExecution.toRdd}'s
   * wrapper, which would evaluate it under the session's settings as they were, generated. An
   * interpreted write is one of few rows per table, whose Parquet writers also start with small
   * buffers ({@link #FEW_ROWS_PAGE_SIZE}).
   *
   * <p>{@code summarise}: the input's column after the tables' is a {@link BatchSummary} struct,
   * and each task returns its rows' summary (see this class's comment).
   *
   * @return per table (the order of {@code outputs}), what was written (null where the output
   *     is), and the tasks' summaries
   */
  public static Outcome write(
      QueryExecution query,
      TableOutput[] outputs,
      int tasks,
      boolean interpreted,
      boolean summarise) {
    String tracker = new SimpleDateFormat("yyyyMMddHHmmss", Locale.US).format(new Date());
    MultiTableWrite write = new MultiTableWrite(outputs, tracker, summarise, interpreted);
    RDD<InternalRow> input = interpreted ? query.executedPlan().execute() : query.toRdd();
    SparkContext context = input.sparkContext();
    Map<String, String> set = new HashMap<>();
    if (interpreted) {
      Map<String, String> conf =
          CollectionConverters.asJava(query.sparkSession().sessionState().conf().getAllConfs());
      for (Map.Entry<String, String> e : conf.entrySet()) {
        if (e.getKey().startsWith("spark")) {
          set.put(e.getKey(), e.getValue());
        }
      }
      set.put(FACTORY_MODE, "NO_CODEGEN");
    }
    Map<String, String> before = new HashMap<>();
    for (Map.Entry<String, String> e : set.entrySet()) {
      before.put(e.getKey(), context.getLocalProperty(e.getKey()));
      context.setLocalProperty(e.getKey(), e.getValue());
    }
    List<TaskOutput> results;
    try {
      results = input.toJavaRDD().coalesce(Math.max(tasks, 1)).mapPartitions(write).collect();
    } finally {
      for (Map.Entry<String, String> e : before.entrySet()) {
        context.setLocalProperty(e.getKey(), e.getValue());
      }
    }
    Written[] out = new Written[outputs.length];
    List<String> summaries = new ArrayList<>();
    for (TaskOutput result : results) {
      if (result.summary != null) {
        summaries.add(result.summary);
      }
    }
    for (int t = 0; t < outputs.length; t++) {
      TableOutput table = outputs[t];
      if (table == null) {
        continue;
      }
      List<TaskCommitMessage> messages = new ArrayList<>();
      List<List<WriteTaskStats>> stats = new ArrayList<>();
      for (int k = 0; k < table.trackers.length; k++) {
        stats.add(new ArrayList<>());
      }
      long rows = 0;
      long max = Long.MIN_VALUE;
      boolean hasMax = false;
      for (TaskOutput result : results) {
        if (result.table != t) {
          continue;
        }
        messages.add(result.commit);
        for (int k = 0; k < table.trackers.length; k++) {
          stats.get(k).add(result.stats[k]);
        }
        rows += result.rows;
        if (result.hasEventTime) {
          max = Math.max(max, result.maxEventTime);
          hasMax = true;
        }
      }
      long started = System.currentTimeMillis();
      table.committer.commitJob(null, CollectionConverters.asScala(messages).toSeq());
      long took = System.currentTimeMillis() - started;
      for (int k = 0; k < table.trackers.length; k++) {
        table.trackers[k].processStats(CollectionConverters.asScala(stats.get(k)).toSeq(), took);
      }
      out[t] = new Written(rows, max, hasMax);
    }
    return new Outcome(out, summaries.toArray(new String[0]));
  }

  /** What {@link #write} did: per table what it wrote, and the tasks' summaries. */
  public static final class Outcome {
    private final Written[] written;
    private final String[] summaries;

    Outcome(Written[] written, String[] summaries) {
      this.written = written;
      this.summaries = summaries;
    }

    /** Per table (the order of the write's outputs), what was written; null where the output
     * is. */
    public Written[] written() {
      return written;
    }

    /** Each task's {@link BatchSummary} as JSON (tasks of no record give none); empty unless
     * the write summarised. */
    public String[] summaries() {
      return summaries;
    }

    /**
     * {@link #written} as one JSON array, a caller across a bridge reads in one call: per
     * table, {@code [rows, largest event time in epoch milliseconds or null]}, or null where
     * the output is.
     */
    public String writtenJson() {
      StringBuilder out = new StringBuilder("[");
      for (int t = 0; t < written.length; t++) {
        if (t > 0) {
          out.append(',');
        }
        Written w = written[t];
        if (w == null) {
          out.append("null");
        } else {
          Long max = w.maxEventTimeMillis();
          out.append('[').append(w.rows()).append(',').append(max == null ? "null" : max.toString())
              .append(']');
        }
      }
      return out.append(']').toString();
    }
  }
}
