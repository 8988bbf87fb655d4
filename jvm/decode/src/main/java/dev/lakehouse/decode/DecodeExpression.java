package dev.lakehouse.decode;

import java.util.List;
import java.util.Objects;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenFallback;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@link DebeziumDecoder} as a Catalyst expression of a record's {@code key} and {@code value}
 * bytes: it returns Spark's own row ({@link InternalRow}), built by the decoder, where a Java
 * UDF would return an external {@code Row} for Spark to convert field by field. Whole-stage
 * code calls {@link #eval} ({@link CodegenFallback}); the decode itself is Java either way.
 *
 * <p>Its product (what Catalyst copies it by) is its constructor's four arguments. The
 * specification's text travels with the plan; a JVM compiles it once, on its first use, and
 * its later tasks share the decoder ({@link DebeziumDecoder#of}). Plans
 * print it as {@code lakehouse_decode(key, value)}, without the specification.
 */
public final class DecodeExpression extends Expression
    implements CodegenFallback, java.io.Serializable {
  private static final long serialVersionUID = 1L;

  private final Expression key;
  private final Expression value;
  private final String spec;
  private final String type;
  private final DataType dataType;
  private transient DebeziumDecoder decoder;

  /**
   * The decode of {@code key} and {@code value} (binary) by the specification {@code spec},
   * returning the struct type {@code type} (both JSON texts made by lakehouse's Python side).
   */
  public DecodeExpression(Expression key, Expression value, String spec, String type) {
    this(key, value, spec, type, DataType.fromJson(type), null);
  }

  /** A copy over other children: the type already parsed, the decoder (if any) shared. */
  private DecodeExpression(
      Expression key,
      Expression value,
      String spec,
      String type,
      DataType dataType,
      DebeziumDecoder decoder) {
    this.key = key;
    this.value = value;
    this.spec = spec;
    this.type = type;
    this.dataType = dataType;
    this.decoder = decoder;
    CodegenFallback.$init$(this);
  }

  private DebeziumDecoder decoder() {
    DebeziumDecoder d = decoder;
    if (d == null) {
      d = decoder = DebeziumDecoder.of(spec, type, dataType);
    }
    return d;
  }

  /** Compiles the specification now (on the driver: a bad one fails before any task). */
  DecodeExpression checked() {
    decoder();
    return this;
  }

  @Override
  public Object eval(InternalRow input) {
    return decoder().decode((byte[]) key.eval(input), (byte[]) value.eval(input));
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    return CodegenFallback.super.doGenCode(ctx, ev);
  }

  @Override
  public DataType dataType() {
    return dataType;
  }

  @Override
  public boolean nullable() {
    return false;
  }

  @Override
  public Seq<Expression> children() {
    return CollectionConverters.asScala(List.of(key, value)).toList();
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> children) {
    return new DecodeExpression(
        children.apply(0), children.apply(1), spec, type, dataType, decoder);
  }

  @Override
  public String prettyName() {
    return "lakehouse_decode";
  }

  @Override
  public String toString() {
    return prettyName() + "(" + key + ", " + value + ")";
  }

  @Override
  public String sql() {
    return prettyName() + "(" + key.sql() + ", " + value.sql() + ")";
  }

  @Override
  @SuppressWarnings({"unchecked", "rawtypes"})
  public scala.collection.Iterator<Object> flatArguments() {
    return (scala.collection.Iterator) children().iterator();
  }

  @Override
  public int productArity() {
    return 4;
  }

  @Override
  public Object productElement(int n) {
    switch (n) {
      case 0:
        return key;
      case 1:
        return value;
      case 2:
        return spec;
      case 3:
        return type;
      default:
        throw new IndexOutOfBoundsException(String.valueOf(n));
    }
  }

  @Override
  public boolean canEqual(Object that) {
    return that instanceof DecodeExpression;
  }

  @Override
  public boolean equals(Object o) {
    if (this == o) {
      return true;
    }
    if (!(o instanceof DecodeExpression)) {
      return false;
    }
    DecodeExpression e = (DecodeExpression) o;
    return key.equals(e.key) && value.equals(e.value) && spec.equals(e.spec) && type.equals(e.type);
  }

  @Override
  public int hashCode() {
    return Objects.hash(key, value, spec, type);
  }
}
