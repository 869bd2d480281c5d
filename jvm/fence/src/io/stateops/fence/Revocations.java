package io.stateops.fence;

import java.io.IOException;
import java.net.URI;
import java.util.concurrent.CopyOnWriteArrayList;

import org.apache.hadoop.fs.Path;

/**
 * The folders this JVM writes nothing more under: a job's checkpoints and tables once its run found that it lost the
 * job's lease. StateOps' driver revokes them (through Py4J) the moment it finds the loss, before it says so, and every
 * write through this jar checks them: a checkpoint's commit points and state store files
 * ({@link CreateOnceCheckpointFileManager}) and Delta's commits ({@link CreateOnceLogStore}). Work already running
 * when the loss is found (a task computing a batch's state, a stream thread about to plan the next offsets) then
 * fails at its next write instead of issuing it.
 *
 * <p>The check is per JVM: with Spark in local mode (StateOps' default) the executors share the driver's JVM; on a
 * cluster an executor's state store writes are not revoked (they are not commit points: a batch's state files are
 * the same whoever computed them from the same offsets), while the commit points are written by the driver.
 *
 * <p>A folder is compared by the store's bucket or host and its path, whatever the URL scheme ({@code s3://} and
 * {@code s3a://} name one object), and only at a path boundary ({@code /jobs/a} does not cover {@code /jobs/ab}).
 */
public final class Revocations {

  private static final CopyOnWriteArrayList<String> REVOKED = new CopyOnWriteArrayList<>();

  private Revocations() {
  }

  /** No write through this jar under {@code folder} (a URL or a local path) from now on, in this JVM. */
  public static void revoke(String folder) {
    String key = key(new Path(folder).toUri());
    if (!REVOKED.contains(key)) {
      REVOKED.add(key);
    }
  }

  /**
   * Writes under {@code folder} allowed again: a new run of the job took its lease in this JVM (a long-lived process
   * such as a Dagster code server runs the job again after a run of it lost its lease; that run's queries were
   * stopped when it found the loss).
   */
  public static void restore(String folder) {
    REVOKED.remove(key(new Path(folder).toUri()));
  }

  /** Whether {@code path} is under a revoked folder. */
  public static boolean revoked(Path path) {
    if (REVOKED.isEmpty()) {
      return false;
    }
    String key = key(path.toUri());
    for (String folder : REVOKED) {
      if (key.equals(folder) || key.startsWith(folder + "/")) {
        return true;
      }
    }
    return false;
  }

  /** Throws RevokedWriteException when {@code path} is under a revoked folder. */
  public static void check(Path path) throws RevokedWriteException {
    if (revoked(path)) {
      throw new RevokedWriteException(path);
    }
  }

  private static String key(URI uri) {
    String authority = uri.getAuthority() == null ? "" : uri.getAuthority();
    String path = uri.getPath() == null ? "" : uri.getPath();
    while (path.length() > 1 && path.endsWith("/")) {
      path = path.substring(0, path.length() - 1);
    }
    return authority + path;
  }

  /** A write refused because its folder was revoked: the run lost its job's lease. */
  public static final class RevokedWriteException extends IOException {
    private static final long serialVersionUID = 1L;

    RevokedWriteException(Path path) {
      super(path + " was not written: this run lost its job's lease, and writes nothing more under the job's folders");
    }
  }
}
