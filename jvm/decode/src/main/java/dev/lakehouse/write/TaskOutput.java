package dev.lakehouse.write;

import java.io.Serializable;

import org.apache.spark.internal.io.FileCommitProtocol.TaskCommitMessage;
import org.apache.spark.sql.execution.datasources.WriteTaskStats;

/** What one task wrote of one table: its commit message, its trackers' statistics (in the
 * order of {@link TableOutput}'s trackers), its row count and its largest event time; or, with
 * {@link #table} -1, the task's {@link BatchSummary} of its records, as JSON. */
final class TaskOutput implements Serializable {
  private static final long serialVersionUID = 1L;

  final int table;
  final TaskCommitMessage commit;
  final WriteTaskStats[] stats;
  final long rows;
  /** Epoch microseconds; meaningful when {@link #hasEventTime}. */
  final long maxEventTime;
  final boolean hasEventTime;
  /** The task's summary of its records (JSON, {@link BatchSummary#toJson}); null for a table. */
  final String summary;

  TaskOutput(
      int table,
      TaskCommitMessage commit,
      WriteTaskStats[] stats,
      long rows,
      long maxEventTime,
      boolean hasEventTime) {
    this.table = table;
    this.commit = commit;
    this.stats = stats;
    this.rows = rows;
    this.maxEventTime = maxEventTime;
    this.hasEventTime = hasEventTime;
    this.summary = null;
  }

  /** A task's summary of its records. */
  TaskOutput(String summary) {
    this.table = -1;
    this.commit = null;
    this.stats = null;
    this.rows = 0;
    this.maxEventTime = 0;
    this.hasEventTime = false;
    this.summary = summary;
  }
}
