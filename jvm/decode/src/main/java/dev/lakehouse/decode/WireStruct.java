package dev.lakehouse.decode;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;

/**
 * A struct as Kafka Connect's {@code JsonConverter} writes it: its fields in schema order, each
 * of a scalar wire type or a nested struct. Read from the Spark JSON form of a struct type
 * ({@code {"type":"struct","fields":[{"name":..,"type":..},..]}}), whose type names are Spark's.
 *
 * <p>{@link #keys} holds each field's name as its text in the canonical form, with the comma
 * before it for every field but the first: {@code "before":}, {@code ,"after":}, ...
 */
final class WireStruct implements Serializable {
  private static final long serialVersionUID = 1L;

  /** A field's wire type. */
  enum Type {
    BOOLEAN,
    BYTE,
    SHORT,
    INTEGER,
    LONG,
    FLOAT,
    DOUBLE,
    STRING,
    STRUCT;

    static Type of(String sparkName) {
      switch (sparkName) {
        case "boolean":
          return BOOLEAN;
        case "byte":
          return BYTE;
        case "short":
          return SHORT;
        case "integer":
          return INTEGER;
        case "long":
          return LONG;
        case "float":
          return FLOAT;
        case "double":
          return DOUBLE;
        case "string":
          return STRING;
        default:
          throw new IllegalArgumentException("not a wire type: " + sparkName);
      }
    }

    boolean integral() {
      return this == BYTE || this == SHORT || this == INTEGER || this == LONG;
    }

    long min() {
      switch (this) {
        case BYTE:
          return Byte.MIN_VALUE;
        case SHORT:
          return Short.MIN_VALUE;
        case INTEGER:
          return Integer.MIN_VALUE;
        default:
          return Long.MIN_VALUE;
      }
    }

    long max() {
      switch (this) {
        case BYTE:
          return Byte.MAX_VALUE;
        case SHORT:
          return Short.MAX_VALUE;
        case INTEGER:
          return Integer.MAX_VALUE;
        default:
          return Long.MAX_VALUE;
      }
    }
  }

  final String[] names;
  final Type[] types;
  /** The nested struct of each {@link Type#STRUCT} field, else null. */
  final WireStruct[] nested;

  final byte[][] keys;
  /** Whether a field name's canonical text holds {@code &#92;ud} or {@code &#92;uD} (see {@link
   * CanonicalReader}): such a struct is never read. */
  final boolean surrogateName;

  private WireStruct(String[] names, Type[] types, WireStruct[] nested) {
    this.names = names;
    this.types = types;
    this.nested = nested;
    this.keys = new byte[names.length][];
    boolean surrogate = false;
    for (int i = 0; i < names.length; i++) {
      String key = (i == 0 ? "" : ",") + CanonicalReader.quoted(names[i]) + ":";
      keys[i] = key.getBytes(StandardCharsets.UTF_8);
      surrogate |= key.contains("\\ud") || key.contains("\\uD");
      if (nested[i] != null) {
        surrogate |= nested[i].surrogateName;
      }
    }
    this.surrogateName = surrogate;
  }

  /** The struct of a Spark JSON struct type. */
  static WireStruct of(JsonNode type) {
    if (!"struct".equals(type.path("type").asText())) {
      throw new IllegalArgumentException("not a struct type: " + type);
    }
    JsonNode fields = type.path("fields");
    int n = fields.size();
    String[] names = new String[n];
    Type[] types = new Type[n];
    WireStruct[] nested = new WireStruct[n];
    for (int i = 0; i < n; i++) {
      JsonNode f = fields.get(i);
      names[i] = f.path("name").asText();
      JsonNode t = f.path("type");
      if (t.isObject()) {
        types[i] = Type.STRUCT;
        nested[i] = of(t);
      } else {
        types[i] = Type.of(t.asText());
      }
    }
    return new WireStruct(names, types, nested);
  }

  /** The position of a field, or -1. */
  int index(String name) {
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }
}
