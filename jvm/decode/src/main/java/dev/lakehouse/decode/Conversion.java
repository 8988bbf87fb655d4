package dev.lakehouse.decode;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.math.BigDecimal;
import java.time.DateTimeException;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.Base64;

/**
 * A wire value converted to its column's value, exactly as the Python decoder converts it, or
 * {@link CanonicalReader#FAIL} when this code is not sure to (the record then goes to Python).
 * A null wire value is a null column value. The conversions are those of {@code
 * lakehouse.cdc.wire.Conversion}; the Spark type of each result is decided in Python ({@code
 * lakehouse.dimension.jvm_decode}) and the Java object given here is the one Spark's converters
 * take for it: {@link Byte}, {@link Short}, {@link Integer}, {@link Long}, {@link Float}, {@link
 * Double}, {@link Boolean}, {@link String}, {@code byte[]}, {@link LocalDate}, {@link Instant},
 * {@link BigDecimal}.
 */
final class Conversion implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Event times a timestamp column can hold (years 1 to 9999), epoch milliseconds. */
  static final long MIN_MILLIS = -62_135_596_800_000L;

  static final long MAX_MILLIS = 253_402_300_799_999L;
  private static final long MIN_MICROS = MIN_MILLIS * 1000;
  private static final long MAX_MICROS = MAX_MILLIS * 1000 + 999;
  private static final long MIN_DAY = -719_162; // 0001-01-01
  private static final long MAX_DAY = 2_932_896; // 9999-12-31
  private static final long TIME_MILLIS_LIMIT = Long.MAX_VALUE / 1000;

  enum Kind {
    SAME,
    BASE64,
    DATE,
    TS_MILLIS,
    TS_MICROS,
    TS_NANOS,
    ZONED,
    TIME_MILLIS,
    TIME_NANOS,
    DECIMAL
  }

  final Kind kind;
  /** The wire type a {@link Kind#SAME} value keeps (its Java class follows it). */
  final WireStruct.Type wire;

  final int precision;
  final int scale;

  private Conversion(Kind kind, WireStruct.Type wire, int precision, int scale) {
    this.kind = kind;
    this.wire = wire;
    this.precision = precision;
    this.scale = scale;
  }

  /**
   * A conversion as the specification names it ({@code "same"}, {@code "ts_micros"}, {@code
   * ["decimal", p, s]}, ...), of a value of wire type {@code wire}.
   */
  static Conversion of(JsonNode spec, WireStruct.Type wire) {
    if (spec.isArray()) {
      if (!"decimal".equals(spec.get(0).asText()) || wire != WireStruct.Type.STRING) {
        throw new IllegalArgumentException("not a decimal of base64 text: " + spec);
      }
      return new Conversion(Kind.DECIMAL, wire, spec.get(1).asInt(), spec.get(2).asInt());
    }
    Kind kind = Kind.valueOf(spec.asText().toUpperCase(java.util.Locale.ROOT));
    boolean integral = wire.integral();
    boolean fits;
    switch (kind) {
      case SAME:
        fits = wire != WireStruct.Type.STRUCT;
        break;
      case BASE64:
      case ZONED:
        fits = wire == WireStruct.Type.STRING;
        break;
      default:
        fits = integral;
    }
    if (!fits) {
      throw new IllegalArgumentException("conversion " + kind + " of a " + wire + " value");
    }
    return new Conversion(kind, wire, 0, 0);
  }

  Object apply(Object w) {
    if (w == null) {
      return null;
    }
    switch (kind) {
      case SAME:
        return same(w);
      case BASE64:
        return base64((String) w);
      case DATE:
        {
          long days = (Long) w;
          return days >= MIN_DAY && days <= MAX_DAY
              ? LocalDate.ofEpochDay(days)
              : CanonicalReader.FAIL;
        }
      case TS_MILLIS:
        {
          long ms = (Long) w;
          return ms >= MIN_MILLIS && ms <= MAX_MILLIS
              ? Instant.ofEpochMilli(ms)
              : CanonicalReader.FAIL;
        }
      case TS_MICROS:
        {
          long us = (Long) w;
          return us >= MIN_MICROS && us <= MAX_MICROS ? micros(us) : CanonicalReader.FAIL;
        }
      case TS_NANOS:
        return micros(Math.floorDiv((Long) w, 1000L));
      case TIME_MILLIS:
        {
          long ms = (Long) w;
          return ms >= -TIME_MILLIS_LIMIT && ms <= TIME_MILLIS_LIMIT
              ? (Object) (ms * 1000)
              : CanonicalReader.FAIL;
        }
      case TIME_NANOS:
        return Math.floorDiv((Long) w, 1000L);
      case ZONED:
        return zoned((String) w);
      default:
        return decimal((String) w);
    }
  }

  private Object same(Object w) {
    switch (wire) {
      case BYTE:
        return (byte) (long) (Long) w;
      case SHORT:
        return (short) (long) (Long) w;
      case INTEGER:
        return (int) (long) (Long) w;
      default:
        return w;
    }
  }

  static Instant micros(long us) {
    return Instant.ofEpochSecond(Math.floorDiv(us, 1_000_000L), Math.floorMod(us, 1_000_000L) * 1000);
  }

  private static boolean base64Char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+'
        || c == '/';
  }

  /**
   * Strict padded base64: groups of four, the last one {@code xx==} or {@code xxx=} at most
   * (the unused bits are not checked, by either decoder).
   */
  static boolean isBase64(String s) {
    int n = s.length();
    if (n % 4 != 0) {
      return false;
    }
    int pad = 0;
    if (n > 0 && s.charAt(n - 1) == '=') {
      pad = s.charAt(n - 2) == '=' ? 2 : 1;
    }
    for (int i = 0; i < n - pad; i++) {
      if (!base64Char(s.charAt(i))) {
        return false;
      }
    }
    return true;
  }

  private static Object base64(String s) {
    return isBase64(s) ? Base64.getDecoder().decode(s) : CanonicalReader.FAIL;
  }

  /** Base64 of a big-endian two's-complement unscaled value of at most eight bytes. */
  private Object decimal(String s) {
    if (!isBase64(s)) {
      return CanonicalReader.FAIL;
    }
    byte[] raw = Base64.getDecoder().decode(s);
    if (raw.length < 1 || raw.length > 8) {
      return CanonicalReader.FAIL;
    }
    long unscaled = raw[0]; // sign-extended
    for (int i = 1; i < raw.length; i++) {
      unscaled = (unscaled << 8) | (raw[i] & 0xFF);
    }
    BigDecimal value = BigDecimal.valueOf(unscaled, scale);
    return value.precision() <= precision ? value : CanonicalReader.FAIL;
  }

  private static int digits(String s, int from, int to) {
    int v = 0;
    for (int i = from; i < to; i++) {
      char c = s.charAt(i);
      if (c < '0' || c > '9') {
        return -1;
      }
      v = v * 10 + (c - '0');
    }
    return v;
  }

  /**
   * ISO-8601 with an offset, {@code yyyy-MM-ddTHH:mm:ss[.f{1,9}](Z|+HH:MM)}, as Debezium writes
   * a {@code ZonedTimestamp}; the fraction cut to microseconds (not rounded). The first and the
   * last day of years 1 to 9999 are left to Python (an offset can move them out of range), and so
   * is an offset beyond 18 hours.
   */
  private static Object zoned(String s) {
    int n = s.length();
    if (n < 20
        || s.charAt(4) != '-'
        || s.charAt(7) != '-'
        || s.charAt(10) != 'T'
        || s.charAt(13) != ':'
        || s.charAt(16) != ':'
        || s.startsWith("0000")
        || s.startsWith("0001-01-01")
        || s.startsWith("9999-12-31")) {
      return CanonicalReader.FAIL;
    }
    int year = digits(s, 0, 4);
    int month = digits(s, 5, 7);
    int day = digits(s, 8, 10);
    int hour = digits(s, 11, 13);
    int minute = digits(s, 14, 16);
    int second = digits(s, 17, 19);
    if (year < 0 || month < 1 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59
        || second < 0 || second > 59) {
      return CanonicalReader.FAIL;
    }
    int i = 19;
    int micros = 0;
    if (s.charAt(i) == '.') {
      int start = ++i;
      while (i < n && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
        i++;
      }
      int count = i - start;
      if (count < 1 || count > 9) {
        return CanonicalReader.FAIL;
      }
      for (int k = 0; k < 6; k++) {
        micros = micros * 10 + (k < count ? s.charAt(start + k) - '0' : 0);
      }
    }
    ZoneOffset offset;
    if (i == n - 1 && s.charAt(i) == 'Z') {
      offset = ZoneOffset.UTC;
    } else if (i == n - 6 && (s.charAt(i) == '+' || s.charAt(i) == '-') && s.charAt(i + 3) == ':') {
      int oh = digits(s, i + 1, i + 3);
      int om = digits(s, i + 4, i + 6);
      if (oh < 0 || om < 0 || om > 59 || oh > 18) {
        return CanonicalReader.FAIL;
      }
      int sign = s.charAt(i) == '-' ? -1 : 1;
      try {
        offset = ZoneOffset.ofHoursMinutes(sign * oh, sign * om);
      } catch (DateTimeException e) {
        return CanonicalReader.FAIL;
      }
    } else {
      return CanonicalReader.FAIL;
    }
    try {
      return LocalDateTime.of(year, month, day, hour, minute, second, micros * 1000)
          .toInstant(offset);
    } catch (DateTimeException e) {
      return CanonicalReader.FAIL;
    }
  }
}
