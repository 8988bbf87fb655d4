package dev.lakehouse.fs;

/**
 * Hadoop's checksummed local file system ({@code fs.file.impl}) over {@link
 * RawLocalFileSystem}: the same files, checksums and results, without a process forked per
 * file created.
 */
public class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {
  public LocalFileSystem() {
    super(new RawLocalFileSystem());
  }
}
