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
final class Internal {
  private enum Kind {
    SAME,
    TEXT,
    DATE,
    TIMESTAMP,
    DECIMAL
  }

  private final Kind[] kinds;
  private final StructField[] fields;

  private Internal(StructType struct) {
    fields = struct.fields();
    kinds = new Kind[fields.length];
    for (int i = 0; i < fields.length; i++) {
      kinds[i] = kind(fields[i].dataType());
    }
  }

  /** How the fields of {@code struct} hold their values. */
  static Internal of(StructType struct) {
    return new Internal(struct);
  }

  private static Kind kind(DataType t) {
    if (t instanceof StringType) {
      return Kind.TEXT;
    }
    if (t instanceof DecimalType) {
      return Kind.DECIMAL;
    }
    if (t instanceof DateType) {
      return Kind.DATE;
    }
    if (t instanceof TimestampType) {
      return Kind.TIMESTAMP;
    }
    return Kind.SAME;
  }

  /** A row of {@code values}, one per field of the struct, each held as its field's type. */
  InternalRow row(Object[] values) {
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
          DecimalType d = (DecimalType) fields[i].dataType();
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
