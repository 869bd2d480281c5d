package io.stateops.fence;

import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager with create-once commit points, on a local disk and on S3 through S3A.
 *
 * <p>Spark writes every commit point of a checkpoint with {@code createAtomic(path, overwriteIfPossible=false)}:
 * {@code offsets/N}, {@code commits/N}, {@code metadata}, the file source and sink logs, the state schema and
 * operator metadata files. The stock managers check that the name is free and then rename (or, on S3, PUT), so a
 * second writer that passes the check in between replaces the first one's file: a stale driver, one that lost its
 * job's lease and resumes after a freeze, could rewrite a batch the live driver already planned or committed.
 * Here the name is taken once, atomically in the store ({@link PendingFile}), and the loser's close() throws
 * org.apache.hadoop.fs.FileAlreadyExistsException, which Spark reports as "Multiple streaming queries are
 * concurrently using" the checkpoint and which fails the stale query.
 *
 * <p>State store files ({@code overwriteIfPossible=true}: RocksDB's zips and changelogs, which Spark may rewrite by
 * design) are written as the FileSystem-based manager writes them (a temp file renamed), except on S3A, where an
 * object written in place appears whole: one PUT instead of a temp PUT, a COPY and a DELETE. Every write, commit
 * point or state file, is refused once its folder is revoked ({@link Revocations}), at create and at close. Reads,
 * listings, deletes and every call on a file system other than a local disk or S3A are the FileSystem-based
 * manager's. Local commit points are written without Hadoop's {@code .NAME.crc} sidecar.
 *
 * <p>Spark builds it by reflection, with this constructor, wherever it opens a checkpoint (driver and executors):
 * {@code spark.sql.streaming.checkpointFileManagerClass=io.stateops.fence.CreateOnceCheckpointFileManager}, with
 * its jar on {@code spark.jars}.
 */
public class CreateOnceCheckpointFileManager extends FileSystemBasedCheckpointFileManager {

  private final boolean createOnce;

  public CreateOnceCheckpointFileManager(Path path, Configuration hadoopConf) {
    super(path, hadoopConf);
    this.createOnce = PendingFile.supports(fs());
  }

  @Override
  public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    try {
      Revocations.check(path);
      if (!overwriteIfPossible && createOnce) {
        PendingFile file = PendingFile.open(fs(), path, true);
        return new Guarded(file, path, () -> publish(file, path), file::discard);
      }
      if (overwriteIfPossible && PendingFile.isS3A(fs())) {
        // an object appears whole when its PUT completes, so it is written in place (no temp object copied and
        // deleted), and abort() uploads nothing: a write refused at close() leaves no request behind
        FSDataOutputStream out = fs().create(path, true);
        return new Guarded(out, path, out::close, out::abort);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);  // the interface declares none; Spark fails the batch either way
    }
    CheckpointFileManager.CancellableFSDataOutputStream out = super.createAtomic(path, overwriteIfPossible);
    return new Guarded(out, path, out::close, out::cancel);
  }

  private static void publish(PendingFile file, Path path) throws IOException {
    try {
      file.publish();
    } catch (java.nio.file.FileAlreadyExistsException e) {
      FileAlreadyExistsException taken =
          new FileAlreadyExistsException(path + " already exists: another writer created it first");
      taken.initCause(e);
      throw taken;
    }
  }

  /** What close() does with the bytes written: makes them appear under the final name. */
  @FunctionalInterface
  private interface Publish {
    void run() throws IOException;
  }

  /**
   * The stream Spark writes a checkpoint file through: close() publishes unless the folder was revoked in the
   * meantime ({@link Revocations}: the run lost its lease while the file was being written), cancel() and a revoked
   * close() discard. Spark calls cancel() after a failed close() too (HDFSMetadataLog.write), so either runs at most
   * once and the other is then a no-op.
   */
  private static final class Guarded extends CheckpointFileManager.CancellableFSDataOutputStream {

    private final Path path;
    private final Publish publish;
    private final Runnable discard;
    private boolean terminated;

    Guarded(OutputStream out, Path path, Publish publish, Runnable discard) {
      super(out);
      this.path = path;
      this.publish = publish;
      this.discard = discard;
    }

    @Override
    public synchronized void close() throws IOException {
      if (terminated) {
        return;
      }
      terminated = true;
      if (Revocations.revoked(path)) {
        discard.run();
        Revocations.check(path);
      }
      publish.run();
    }

    @Override
    public synchronized void cancel() {
      if (terminated) {
        return;
      }
      terminated = true;
      discard.run();
    }
  }
}
