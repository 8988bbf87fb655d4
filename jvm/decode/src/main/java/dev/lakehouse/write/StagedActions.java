package dev.lakehouse.write;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import dev.lakehouse.reflect.Delta;

import scala.Option;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The actions of one table's staged commit after a {@link MultiTableWrite}, made on the driver
 * in one call: the transaction's {@code SetTransaction} and an {@code AddFile} per file the
 * table's commit protocol added, with the statistics its statistics tracker recorded for the
 * file, as Delta's own writer makes them ({@code TransactionalWrite.writeFiles}).
 *
 * <p>Delta's classes are reached by reflection and each action is made from its JSON form
 * ({@code Action.fromJson}), as the log holds it: this jar compiles against Spark alone and
 * runs with each delta-spark this lakehouse supports, whose action classes differ in their
 * fields. Made over py4j instead, this is about ten round trips and as many JVM objects per
 * table.
 */
public final class StagedActions {
  private static final ObjectMapper JSON = new ObjectMapper();

  private StagedActions() {}

  /**
   * The staged commit's actions, in the order Delta's writer gives them (the transaction's
   * {@code SetTransaction} first). Also registers Delta's auto-compaction hook on the
   * transaction when a file was added (as Delta's writer does: the hook compacts small files
   * where the table or the session asks for it), and records {@code appId} as read by the
   * transaction, so that a concurrent commit of the same application transaction is a
   * conflict.
   *
   * @param txn the table's {@code OptimisticTransaction}
   * @param committer its commit protocol (Delta's {@code DelayedCommitProtocol}), after the job
   * @param stats its statistics tracker (Delta's {@code DeltaJobStatisticsTracker}), after the
   *     job; null where the table collects no statistics
   * @param appId the application transaction's id
   * @param version the application transaction's version
   * @param nowMillis the transaction's {@code lastUpdated}
   * @return the actions, a Scala {@code Seq}
   */
  public static Object make(
      Object txn, Object committer, Object stats, String appId, long version, long nowMillis)
      throws ReflectiveOperationException, java.io.IOException {
    Object action = Delta.object(txn, "org.apache.spark.sql.delta.actions.Action$");
    Method fromJson = action.getClass().getMethod("fromJson", String.class);
    List<Object> out = new ArrayList<>();

    ObjectNode txnLine = JSON.createObjectNode();
    txnLine.putObject("txn")
        .put("appId", appId)
        .put("version", version)
        .put("lastUpdated", nowMillis);
    out.add(fromJson.invoke(action, JSON.writeValueAsString(txnLine)));

    Object recorded = stats == null ? null : Delta.call(stats, "recordedStats");
    Iterator<?> added = ((scala.collection.Iterable<?>) Delta.call(committer, "addedStatuses")).iterator();
    boolean any = false;
    while (added.hasNext()) {
      Object add = added.next();
      any = true;
      ObjectNode line = (ObjectNode) JSON.readTree((String) Delta.call(add, "json"));
      ObjectNode body = (ObjectNode) line.get("add");
      if (recorded != null) {
        String name = (String) Delta.call(Delta.call(add, "toPath"), "getName");
        // the tracker records every file the committer added (Delta's writer asks as strictly)
        @SuppressWarnings("unchecked")
        Option<String> found = ((scala.collection.Map<String, String>) recorded).get(name);
        body.put("stats", found.get());
      }
      if (body.has("tags") && (body.get("tags").isNull() || body.get("tags").isEmpty())) {
        body.remove("tags"); // as Delta's writer leaves an add's
      }
      out.add(fromJson.invoke(action, JSON.writeValueAsString(line)));
    }
    if (any) {
      Object hook = Delta.object(txn, "org.apache.spark.sql.delta.hooks.AutoCompact$");
      Method register = Delta.find(txn, "registerPostCommitHook", 1);
      if (register != null) {
        register.invoke(txn, hook);
      }
    }
    Object readTxn = Delta.call(txn, "readTxn");
    readTxn.getClass().getMethod("addOne", Object.class).invoke(readTxn, appId);
    return CollectionConverters.asScala(out).toSeq();
  }
}
