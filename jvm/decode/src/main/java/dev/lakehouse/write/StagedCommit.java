package dev.lakehouse.write;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

import dev.lakehouse.reflect.Delta;

import scala.Option;

/**
 * A staged write's commit on its Delta transaction, in one call from Python: optionally without
 * Delta's checkpoint hook, then {@code OptimisticTransaction.commitIfNeeded}, then whether the
 * committed version is due for a checkpoint. Over py4j this was a dozen round trips per table
 * and batch.
 *
 * <p>Delta's classes are reached by reflection, their public methods as the Python bridge
 * called them, so this jar compiles against Spark alone and runs with each delta-spark this
 * lakehouse supports.
 */
public final class StagedCommit {
  private StagedCommit() {}

  /**
   * Commit {@code actions} on {@code txn} with {@code operation} and {@code tags}, after Delta's
   * conflict check against every commit since the transaction's snapshot. A Delta exception
   * (a conflict, a refused schema) is thrown as Delta threw it.
   *
   * @param txn the table's {@code OptimisticTransaction}
   * @param actions the commit's actions (a Scala {@code Seq})
   * @param operation Delta's {@code DeltaOperations.Write} of the commit, without {@code
   *     userMetadata}
   * @param userMetadata the commit's {@code userMetadata} (null: none)
   * @param tags the commit's tags (a Scala {@code Map})
   * @param deferCheckpoint take Delta's {@code CheckpointHook} off the transaction's post-commit
   *     hooks first: the caller writes the checkpoint when this says it is due
   * @return {@code [version, due]}: the committed version (-1: nothing to commit) and 1 when the
   *     checkpoint was deferred and the version is a multiple of the table's {@code
   *     delta.checkpointInterval} (0 otherwise, and always where Delta wrote its own)
   */
  public static String commit(
      Object txn,
      Object actions,
      Object operation,
      String userMetadata,
      Object tags,
      boolean deferCheckpoint)
      throws Throwable {
    Object op = withUserMetadata(operation, userMetadata);
    boolean deferred = deferCheckpoint && withoutCheckpointHook(txn);
    Method commit = Delta.method(txn, "commitIfNeeded", 3);
    Option<?> committed;
    try {
      committed = (Option<?>) commit.invoke(txn, actions, op, tags);
    } catch (InvocationTargetException e) {
      throw e.getCause(); // Delta's own exception, as a caller across py4j expects it
    }
    if (committed.isEmpty()) {
      return "-1 0";
    }
    long version = ((Number) committed.get()).longValue();
    boolean due = false;
    if (deferred && version != 0) {
      Object log = Delta.call(txn, "deltaLog");
      Object metadata = Delta.call(txn, "metadata");
      Method interval = Delta.find(log, "checkpointInterval", 1);
      int every = interval == null ? 0 : ((Number) interval.invoke(log, metadata)).intValue();
      due = every > 0 && version % every == 0;
    }
    return version + (due ? " 1" : " 0");
  }

  /**
   * {@code operation} (a Scala case class of Delta's operations with a {@code userMetadata}
   * field) with {@code userMetadata} set to {@code text}, made by its constructor from its
   * other fields as they are: the operations' fields differ between delta-spark versions, their
   * {@code userMetadata} is named alike in each.
   */
  static Object withUserMetadata(Object operation, String text)
      throws ReflectiveOperationException {
    if (text == null) {
      return operation;
    }
    scala.Product fields = (scala.Product) operation;
    int arity = fields.productArity();
    Object[] args = new Object[arity];
    int at = -1;
    for (int i = 0; i < arity; i++) {
      args[i] = fields.productElement(i);
      if ("userMetadata".equals(fields.productElementName(i))) {
        at = i;
      }
    }
    if (at < 0) {
      throw new NoSuchFieldException(operation.getClass().getName() + ".userMetadata");
    }
    args[at] = Option.apply(text);
    for (java.lang.reflect.Constructor<?> c : operation.getClass().getConstructors()) {
      if (c.getParameterCount() == arity) {
        return c.newInstance(args);
      }
    }
    throw new NoSuchMethodException(operation.getClass().getName() + ".<init>/" + arity);
  }

  /**
   * Take Delta's {@code CheckpointHook} off the transaction's post-commit hooks (its checkpoint
   * then runs only when the caller asks); false, with the hooks unchanged, where this
   * delta-spark keeps them elsewhere.
   */
  private static boolean withoutCheckpointHook(Object txn) {
    try {
      // Scala's protected val: public in the bytecode
      Object hooks = Delta.call(txn, "postCommitHooks");
      Object hook = Delta.object(txn, "org.apache.spark.sql.delta.hooks.CheckpointHook$");
      int index = ((Number) hooks.getClass().getMethod("indexOf", Object.class).invoke(hooks, hook))
          .intValue();
      if (index < 0) {
        return false;
      }
      hooks.getClass().getMethod("remove", int.class).invoke(hooks, index);
      return true;
    } catch (ReflectiveOperationException | RuntimeException e) {
      return false;
    }
  }
}
