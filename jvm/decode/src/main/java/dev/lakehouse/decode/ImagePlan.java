package dev.lakehouse.decode;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;

/**
 * A row image (or a key) the decode converts: each column's conversion, in the order of the
 * image's wire struct, and the Python decoder's {@code _row_columns} text of such an image.
 */
final class ImagePlan implements Serializable {
  private static final long serialVersionUID = 1L;

  final Conversion[] conversions;
  final String rowColumns;

  private ImagePlan(Conversion[] conversions, String rowColumns) {
    this.conversions = conversions;
    this.rowColumns = rowColumns;
  }

  /** The plan of {@code {"columns": [[name, conversion], ..], "rowColumns": ..}} over a struct. */
  static ImagePlan of(JsonNode spec, WireStruct struct) {
    JsonNode columns = spec.path("columns");
    if (columns.size() != struct.names.length) {
      throw new IllegalArgumentException("an image plan of another struct: " + spec);
    }
    Conversion[] conversions = new Conversion[columns.size()];
    for (int i = 0; i < conversions.length; i++) {
      JsonNode column = columns.get(i);
      if (!column.get(0).asText().equals(struct.names[i])) {
        throw new IllegalArgumentException("column " + column + " is not field " + struct.names[i]);
      }
      conversions[i] = Conversion.of(column.get(1), struct.types[i]);
    }
    return new ImagePlan(conversions, spec.path("rowColumns").asText());
  }

  /**
   * The converted values of a read struct ({@code Object[]}; null for a null struct), or {@link
   * CanonicalReader#FAIL} when a value does not convert exactly.
   */
  Object convert(Object[] wire) {
    if (wire == null) {
      return null;
    }
    Object[] out = new Object[wire.length];
    for (int i = 0; i < out.length; i++) {
      Object v = conversions[i].apply(wire[i]);
      if (v == CanonicalReader.FAIL) {
        return CanonicalReader.FAIL;
      }
      out[i] = v;
    }
    return out;
  }
}
