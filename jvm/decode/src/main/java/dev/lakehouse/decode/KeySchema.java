package dev.lakehouse.decode;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;

/**
 * A record key's Connect schema the decode knows (compiled in Python by {@code
 * lakehouse.cdc.wire.compile_key}): its payload read in the canonical form and converted.
 */
final class KeySchema implements Serializable {
  private static final long serialVersionUID = 1L;

  final byte[] prefix;
  private final WireStruct payload;
  private final ImagePlan plan;
  /** Where the key's image goes in the decoder's output row. */
  final int slot;

  KeySchema(JsonNode spec) {
    prefix = spec.path("prefix").asText().getBytes(StandardCharsets.UTF_8);
    payload = WireStruct.of(spec.path("payload"));
    plan = ImagePlan.of(spec.path("image"), payload);
    slot = spec.path("slot").asInt();
  }

  /** The Python decoder's {@code _key_columns} of a key of this schema. */
  String keyColumns() {
    return plan.rowColumns;
  }

  /** The key's converted values, or null when the key is not decoded here. */
  Object[] decode(byte[] key) {
    Object read = CanonicalReader.payload(key, prefix.length, payload);
    if (read == CanonicalReader.FAIL) {
      return null;
    }
    Object row = plan.convert((Object[]) read);
    return row == CanonicalReader.FAIL ? null : (Object[]) row;
  }
}
