package dev.lakehouse.fs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system, with the two operations it runs as processes done by Java.
 *
 * <p>Without Hadoop's native library (pip's PySpark has none), Hadoop's {@code
 * RawLocalFileSystem} runs {@code chmod} as a process for every file and directory it creates,
 * and {@code readlink} for every {@code getFileLinkStatus}, which {@code FileContext.rename} (the
 * commit of Delta's {@code HDFSLogStore} and of the streaming checkpoint) calls on each side of
 * each rename. A Delta commit of a local table then forks some twenty processes.
 *
 * <p>This class answers both with {@code java.nio.file}, with Hadoop's results: permissions
 * without the sticky bit are set by {@link Files#setPosixFilePermissions} (which follows a
 * link, as {@code chmod} does), and a path that is not a symbolic link has the status {@link
 * #getFileStatus} gives (what Hadoop returns when {@code readlink} prints nothing; a missing
 * path throws {@code FileNotFoundException} there too). A symbolic link, a sticky bit or a file
 * system without POSIX attributes goes to Hadoop's own code.
 */
public class RawLocalFileSystem extends org.apache.hadoop.fs.RawLocalFileSystem {

  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE,
    PosixFilePermission.OTHERS_WRITE,
    PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE,
    PosixFilePermission.GROUP_WRITE,
    PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE,
    PosixFilePermission.OWNER_WRITE,
    PosixFilePermission.OWNER_READ,
  };

  /** The POSIX permissions of the low nine bits of {@code mode}. */
  static Set<PosixFilePermission> posix(int mode) {
    Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        out.add(BITS[bit]);
      }
    }
    return out;
  }

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    int mode = permission.toShort();
    if ((mode & ~0777) != 0) {
      super.setPermission(p, permission); // the sticky bit: chmod sets it, java.nio cannot
      return;
    }
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(mode));
    } catch (UnsupportedOperationException notPosix) {
      super.setPermission(p, permission);
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }
}
