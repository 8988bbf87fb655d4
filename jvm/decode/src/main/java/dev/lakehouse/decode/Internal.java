package dev.lakehouse.decode;

import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDate;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * How a converted value ({@link Conversion}: the Java object Spark's converters take for its
 * field's type) is held in Spark's own row: exactly what {@code CatalystTypeConverters} makes of
 * it. Text is {@link UTF8String}; a decimal is Spark's {@link Decimal} of its field's precision
 * and scale; a date is its epoch day, a timestamp its epoch microseconds; every other value
 * (numbers, booleans, bytes) is held as it is.
 */
enum Internal {
  SAME,
  TEXT,
  DATE,
  TIMESTAMP,
  DECIMAL;

  /** How each field of {@code struct} holds its value. */
  static Internal[] of(StructType struct) {
    StructField[] fields = struct.fields();
    Internal[] out = new Internal[fields.length];
    for (int i = 0; i < fields.length; i++) {
      out[i] = of(fields[i].dataType());
    }
    return out;
  }

  private static Internal of(DataType t) {
    if (t instanceof StringType) {
      return TEXT;
    }
    if (t instanceof DecimalType) {
      return DECIMAL;
    }
    if (t instanceof DateType) {
      return DATE;
    }
    if (t instanceof TimestampType) {
      return TIMESTAMP;
    }
    return SAME;
  }

  /**
   * A row of {@code values}, typed as {@code kinds} says ({@code types}: their struct's fields,
   * for a decimal's precision and scale).
   */
  static InternalRow row(Internal[] kinds, StructField[] types, Object[] values) {
    Object[] out = new Object[values.length];
    for (int i = 0; i < values.length; i++) {
      Object v = values[i];
      if (v == null) {
        continue;
      }
      switch (kinds[i]) {
        case TEXT:
          out[i] = UTF8String.fromString((String) v);
          break;
        case DECIMAL:
          DecimalType d = (DecimalType) types[i].dataType();
          out[i] = Decimal.apply((BigDecimal) v, d.precision(), d.scale());
          break;
        case DATE:
          out[i] = DateTimeUtils.localDateToDays((LocalDate) v);
          break;
        case TIMESTAMP:
          out[i] = DateTimeUtils.instantToMicros((Instant) v);
          break;
        default:
          out[i] = v;
      }
    }
    return new GenericInternalRow(out);
  }
}
