package dev.lakehouse.decode;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.TreeMap;

/**
 * Which known schema's prefix ({@code {"schema":S,"payload":}, as UTF-8 bytes) a record starts
 * with. At most one can: a prefix is a whole JSON value followed by {@code ,"payload":}. The
 * records of one table come in runs, so the last prefix found is tried first; otherwise only the
 * prefixes whose length ends the record's text at a {@code ,"payload":} are compared.
 */
final class PrefixIndex implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final byte[] TAIL = {',', '"', 'p', 'a', 'y', 'l', 'o', 'a', 'd', '"', ':'};

  private final byte[][] prefixes;
  private final int[] lengths;
  private final int[][] byLength;
  private int last = -1; // a hint only: each task has its own copy of the decoder

  PrefixIndex(List<byte[]> prefixes) {
    this.prefixes = prefixes.toArray(new byte[0][]);
    TreeMap<Integer, List<Integer>> groups = new TreeMap<>();
    for (int i = 0; i < this.prefixes.length; i++) {
      groups.computeIfAbsent(this.prefixes[i].length, k -> new ArrayList<>()).add(i);
    }
    lengths = new int[groups.size()];
    byLength = new int[groups.size()][];
    int g = 0;
    for (var e : groups.entrySet()) {
      lengths[g] = e.getKey();
      byLength[g++] = e.getValue().stream().mapToInt(Integer::intValue).toArray();
    }
  }

  private boolean starts(byte[] text, int i) {
    byte[] p = prefixes[i];
    return text.length > p.length && Arrays.equals(text, 0, p.length, p, 0, p.length);
  }

  /** The index of the prefix {@code text} starts with (followed by at least a byte), or -1. */
  int find(byte[] text) {
    int hint = last;
    if (hint >= 0 && starts(text, hint)) {
      return hint;
    }
    for (int g = 0; g < lengths.length; g++) {
      int n = lengths[g];
      if (n >= text.length) {
        break;
      }
      if (!Arrays.equals(text, n - TAIL.length, n, TAIL, 0, TAIL.length)) {
        continue;
      }
      for (int i : byLength[g]) {
        if (starts(text, i)) {
          last = i;
          return i;
        }
      }
    }
    return -1;
  }
}
