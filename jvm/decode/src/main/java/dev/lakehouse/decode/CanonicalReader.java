package dev.lakehouse.decode;

import java.nio.charset.StandardCharsets;

/**
 * Reads a record's payload only when its text is exactly what Jackson writes of the values it
 * holds: the canonical form, as Kafka Connect's {@code JsonConverter} writes it and as Spark's
 * {@code to_json} writes a parsed value back. Anything else, however valid as JSON, is not read
 * ({@link #FAIL}): the record then goes to the Python decoder, which words every reason. So
 * nothing a parse could skip, coerce or stop at can differ between the two decoders.
 *
 * <p>The canonical form, for a struct of known fields:
 *
 * <ul>
 *   <li>no whitespace; every field of the struct once, in schema order, {@code null} for none;
 *       nothing else;
 *   <li>an integer as {@link Long#toString} writes it (no {@code -0}, no leading zero, no
 *       fraction or exponent), within its wire type's range;
 *   <li>a {@code float} or {@code double} as {@link Float#toString} / {@link Double#toString}
 *       writes the value it parses to (so {@code 1} for a double is not canonical: {@code 1.0}
 *       is); never NaN or an infinity;
 *   <li>a string in valid UTF-8, escaped as Jackson escapes: {@code \"}, {@code \\}, {@code
 *       \b \t \n \f \r}, {@code &#92;u00XX} (upper-case hex) for the other control
 *       characters, and nothing else escaped;
 *   <li>no {@code &#92;ud} or {@code &#92;uD} anywhere in the text (what a lone surrogate's escape
 *       would be; the Python decoder's {@code encoding} error).
 * </ul>
 *
 * <p>Values come back as Java objects: {@link Long} for every integral type, {@link Float},
 * {@link Double}, {@link Boolean}, {@link String}, {@code Object[]} for a struct (its fields in
 * order), {@code null} for JSON null.
 */
final class CanonicalReader {
  /** Not in the canonical form: the record is not read here. */
  static final Object FAIL = new Object();

  private static final byte[] NULL = {'n', 'u', 'l', 'l'};
  private static final byte[] TRUE = {'t', 'r', 'u', 'e'};
  private static final byte[] FALSE = {'f', 'a', 'l', 's', 'e'};
  private static final char[] HEX = "0123456789ABCDEF".toCharArray();

  private final byte[] b;
  private final int end;
  private int pos;

  CanonicalReader(byte[] bytes, int start) {
    this.b = bytes;
    this.pos = start;
    this.end = bytes.length;
  }

  /**
   * The payload of a wrapped record (the text after its schema's prefix): a struct, then the
   * wrapper's closing brace, then the end of the text. {@link #FAIL} for anything else,
   * including a null payload.
   */
  static Object payload(byte[] record, int start, WireStruct type) {
    CanonicalReader r = new CanonicalReader(record, start);
    Object v = r.struct(type);
    if (v == FAIL || v == null || !r.literal((byte) '}') || r.pos != r.end) {
      return FAIL;
    }
    return v;
  }

  /** A name or string value written as Jackson writes it (see the class comment). */
  static String quoted(String s) {
    StringBuilder out = new StringBuilder(s.length() + 2).append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"':
          out.append("\\\"");
          break;
        case '\\':
          out.append("\\\\");
          break;
        case '\b':
          out.append("\\b");
          break;
        case '\t':
          out.append("\\t");
          break;
        case '\n':
          out.append("\\n");
          break;
        case '\f':
          out.append("\\f");
          break;
        case '\r':
          out.append("\\r");
          break;
        default:
          if (c < 0x20) {
            out.append("\\u00").append(HEX[c >> 4]).append(HEX[c & 0xF]);
          } else {
            out.append(c);
          }
      }
    }
    return out.append('"').toString();
  }

  private boolean literal(byte c) {
    if (pos < end && b[pos] == c) {
      pos++;
      return true;
    }
    return false;
  }

  private boolean literal(byte[] text) {
    int n = text.length;
    if (end - pos < n) {
      return false;
    }
    for (int i = 0; i < n; i++) {
      if (b[pos + i] != text[i]) {
        return false;
      }
    }
    pos += n;
    return true;
  }

  private Object struct(WireStruct s) {
    if (literal(NULL)) {
      return null;
    }
    if (s.surrogateName || !literal((byte) '{')) {
      return FAIL;
    }
    Object[] values = new Object[s.names.length];
    for (int i = 0; i < values.length; i++) {
      if (!literal(s.keys[i])) {
        return FAIL;
      }
      Object v = value(s.types[i], s.nested[i]);
      if (v == FAIL) {
        return FAIL;
      }
      values[i] = v;
    }
    return literal((byte) '}') ? values : FAIL;
  }

  private Object value(WireStruct.Type type, WireStruct nested) {
    if (type == WireStruct.Type.STRUCT) {
      return struct(nested);
    }
    if (literal(NULL)) {
      return null;
    }
    switch (type) {
      case BOOLEAN:
        if (literal(TRUE)) {
          return Boolean.TRUE;
        }
        return literal(FALSE) ? Boolean.FALSE : FAIL;
      case STRING:
        return string();
      case FLOAT:
      case DOUBLE:
        return fraction(type);
      default:
        return integer(type);
    }
  }

  private boolean digit() {
    return pos < end && b[pos] >= '0' && b[pos] <= '9';
  }

  /** An integer in its type's range, as {@link Long#toString} writes it. */
  private Object integer(WireStruct.Type type) {
    boolean negative = literal((byte) '-');
    if (!digit()) {
      return FAIL;
    }
    long value; // accumulated negative, so that Long.MIN_VALUE fits
    if (b[pos] == '0') {
      pos++;
      if (negative || digit()) {
        return FAIL;
      }
      value = 0;
    } else {
      value = 0;
      while (digit()) {
        int d = b[pos++] - '0';
        if (value < (Long.MIN_VALUE + d) / 10) {
          return FAIL;
        }
        value = value * 10 - d;
      }
      if (!negative) {
        if (value == Long.MIN_VALUE) {
          return FAIL;
        }
        value = -value;
      }
    }
    if (value < type.min() || value > type.max()) {
      return FAIL;
    }
    return value;
  }

  /** A float or double as {@link Float#toString} or {@link Double#toString} writes it. */
  private Object fraction(WireStruct.Type type) {
    int start = pos;
    literal((byte) '-');
    if (!digit()) {
      return FAIL;
    }
    if (b[pos] == '0') {
      pos++;
    } else {
      while (digit()) {
        pos++;
      }
    }
    if (literal((byte) '.')) {
      if (!digit()) {
        return FAIL;
      }
      while (digit()) {
        pos++;
      }
    }
    if (pos < end && (b[pos] == 'e' || b[pos] == 'E')) {
      pos++;
      if (!literal((byte) '-')) {
        literal((byte) '+');
      }
      if (!digit()) {
        return FAIL;
      }
      while (digit()) {
        pos++;
      }
    }
    String text = new String(b, start, pos - start, StandardCharsets.ISO_8859_1);
    if (type == WireStruct.Type.FLOAT) {
      float f = Float.parseFloat(text);
      return Float.toString(f).equals(text) ? (Object) f : FAIL;
    }
    double d = Double.parseDouble(text);
    return Double.toString(d).equals(text) ? (Object) d : FAIL;
  }

  /** A string in canonical escapes and valid UTF-8. */
  private Object string() {
    if (!literal((byte) '"')) {
      return FAIL;
    }
    int start = pos;
    while (pos < end) {
      byte c = b[pos];
      if (c == '"') {
        String s = new String(b, start, pos - start, StandardCharsets.ISO_8859_1);
        pos++;
        return s;
      }
      if (c == '\\' || c < 0x20) { // a byte >= 0x80 is negative
        break;
      }
      pos++;
    }
    return slowString(start);
  }

  private Object slowString(int start) {
    StringBuilder out = new StringBuilder(pos - start + 16);
    out.append(new String(b, start, pos - start, StandardCharsets.ISO_8859_1));
    while (pos < end) {
      int c = b[pos] & 0xFF;
      if (c == '"') {
        pos++;
        return out.toString();
      }
      if (c < 0x20) {
        return FAIL;
      }
      if (c == '\\') {
        if (!escape(out)) {
          return FAIL;
        }
        continue;
      }
      if (c < 0x80) {
        out.append((char) c);
        pos++;
        continue;
      }
      int cp = utf8();
      if (cp < 0) {
        return FAIL;
      }
      out.appendCodePoint(cp);
    }
    return FAIL;
  }

  /** One escape, as Jackson writes it (an escaped backslash followed by {@code ud} or {@code uD} is refused). */
  private boolean escape(StringBuilder out) {
    if (end - pos < 2) {
      return false;
    }
    byte e = b[pos + 1];
    pos += 2;
    switch (e) {
      case '"':
        out.append('"');
        return true;
      case '\\':
        if (end - pos >= 2 && b[pos] == 'u' && (b[pos + 1] == 'd' || b[pos + 1] == 'D')) {
          return false;
        }
        out.append('\\');
        return true;
      case 'b':
        out.append('\b');
        return true;
      case 't':
        out.append('\t');
        return true;
      case 'n':
        out.append('\n');
        return true;
      case 'f':
        out.append('\f');
        return true;
      case 'r':
        out.append('\r');
        return true;
      case 'u':
        if (end - pos < 4 || b[pos] != '0' || b[pos + 1] != '0') {
          return false;
        }
        int hi = hex(b[pos + 2]);
        int lo = hex(b[pos + 3]);
        if (hi < 0 || lo < 0 || hi > 1) {
          return false;
        }
        char c = (char) (hi * 16 + lo);
        if (c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r') {
          return false; // Jackson writes these short
        }
        pos += 4;
        out.append(c);
        return true;
      default:
        return false;
    }
  }

  private static int hex(byte c) {
    if (c >= '0' && c <= '9') {
      return c - '0';
    }
    if (c >= 'A' && c <= 'F') {
      return c - 'A' + 10;
    }
    return -1; // lower case is not what Jackson writes
  }

  /** One multi-byte UTF-8 character (well-formed: shortest form, no surrogate), or -1. */
  private int utf8() {
    int cp = codePoint(b, pos, end);
    if (cp >= 0) {
      pos += utf8Length(cp);
    }
    return cp;
  }

  /**
   * The code point of the multi-byte UTF-8 character at {@code at} of {@code b} (which ends at
   * {@code end}) when it is well-formed (shortest form, no surrogate, at most U+10FFFF), else
   * -1; it is {@link #utf8Length} bytes long.
   */
  static int codePoint(byte[] b, int at, int end) {
    int c = b[at] & 0xFF;
    int n;
    int cp;
    int min;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
      cp = c & 0x1F;
      min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      cp = c & 0x0F;
      min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      cp = c & 0x07;
      min = 0x10000;
    } else {
      return -1;
    }
    if (at + n > end) {
      return -1;
    }
    for (int i = 1; i < n; i++) {
      int cc = b[at + i] & 0xFF;
      if ((cc & 0xC0) != 0x80) {
        return -1;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    return cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ? -1 : cp;
  }

  /** The length in UTF-8 of a code point above U+007F (the shortest form's). */
  static int utf8Length(int cp) {
    return cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
}
