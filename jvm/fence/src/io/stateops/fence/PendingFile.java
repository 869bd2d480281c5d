package io.stateops.fence;

import java.io.IOException;
import java.io.OutputStream;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * A commit point being written: its bytes go where no reader looks, and {@link #publish()} makes them appear under
 * the final name only if no other writer's bytes are there, atomically in the store. This is what keeps a stale
 * writer (a driver that lost its lease, froze, and resumed) from replacing a commit point that the live writer
 * made: Spark's and Delta's stock writers check that the name is free and then rename or PUT, and a second writer
 * can pass the check in between.
 *
 * <p>Two stores can do it: a local (POSIX) disk, with link(2) ({@link LocalCreateOnce}), and S3 through S3A, with a
 * conditional PUT ({@link S3ACreateOnce}). The S3A code lives in its own class, loaded only for an S3A path, so
 * that a classpath without hadoop-aws still works on local paths.
 */
abstract class PendingFile extends OutputStream {

  static boolean isLocal(FileSystem fs) {
    return fs instanceof LocalFileSystem || fs instanceof RawLocalFileSystem;
  }

  /** By class name, so that asking about a local path never loads hadoop-aws. */
  static boolean isS3A(FileSystem fs) {
    return "org.apache.hadoop.fs.s3a.S3AFileSystem".equals(fs.getClass().getName());
  }

  /** Whether {@link #open} can create a name once on {@code fs}. */
  static boolean supports(FileSystem fs) {
    return isLocal(fs) || isS3A(fs);
  }

  /**
   * A pending file for {@code path} on {@code fs} (one that {@link #supports} it). {@code createParents}: create a
   * missing parent directory on a local disk, as Hadoop's create() does (Spark's checkpoint files expect it), or
   * throw FileNotFoundException, as Delta's log stores do when _delta_log is missing.
   */
  static PendingFile open(FileSystem fs, Path path, boolean createParents) throws IOException {
    if (isLocal(fs)) {
      return LocalCreateOnce.open(fs, path, createParents);
    }
    if (isS3A(fs)) {
      return S3ACreateOnce.open(fs, path);
    }
    throw new IllegalArgumentException(fs.getUri() + " offers no create-once write");
  }

  /**
   * Makes the written bytes appear under the final name if it is free, or throws
   * java.nio.file.FileAlreadyExistsException (another writer's bytes are there, and stay). Call it once; nothing of
   * this writer's is left behind either way.
   */
  abstract void publish() throws IOException;

  /**
   * Abandons the bytes without publishing them. It runs while another error is being reported, so it is quiet and
   * best effort; a no-op after publish() or a first discard().
   */
  abstract void discard();

  /** Discards unless published: a try-with-resources block that ends before publish() leaves nothing. */
  @Override
  public final void close() {
    discard();
  }
}
