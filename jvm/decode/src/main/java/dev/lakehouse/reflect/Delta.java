package dev.lakehouse.reflect;

import java.lang.reflect.Method;

/**
 * Delta's classes as lakehouse's JVM code reaches them: by reflection, their public methods as
 * the Python bridge calls them, so that this jar compiles against Spark alone and runs with
 * each delta-spark lakehouse supports, whose signatures differ in their default arguments.
 */
public final class Delta {
  private Delta() {}

  /** {@code target.name()}: a public method of no arguments. */
  public static Object call(Object target, String name) throws ReflectiveOperationException {
    return target.getClass().getMethod(name).invoke(target);
  }

  /** The public method {@code name} of {@code target} taking {@code parameters} arguments, or
   * null where its class has none. */
  public static Method find(Object target, String name, int parameters) {
    for (Method m : target.getClass().getMethods()) {
      if (m.getName().equals(name) && m.getParameterCount() == parameters) {
        return m;
      }
    }
    return null;
  }

  /** {@link #find}, or {@code NoSuchMethodException} where its class has none. */
  public static Method method(Object target, String name, int parameters)
      throws NoSuchMethodException {
    Method m = find(target, name, parameters);
    if (m == null) {
      throw new NoSuchMethodException(
          target.getClass().getName() + "." + name + " of " + parameters + " arguments");
    }
    return m;
  }

  /** The Scala object {@code className} (its {@code MODULE$}), loaded by {@code near}'s class
   * loader. */
  public static Object object(Object near, String className) throws ReflectiveOperationException {
    Class<?> c = Class.forName(className, true, near.getClass().getClassLoader());
    return c.getField("MODULE$").get(null);
  }
}
