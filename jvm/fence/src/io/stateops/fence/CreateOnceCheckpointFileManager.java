package io.stateops.fence;

import java.io.IOException;
import java.io.UncheckedIOException;

import org.apache.hadoop.conf.Configuration;
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
 * <p>Everything else is the FileSystem-based manager's: state store files ({@code overwriteIfPossible=true}: RocksDB's
 * zips and changelogs, which Spark may rewrite by design), reads, listings, deletes, and every call on a file system
 * other than a local disk or S3A. Local commit points are written without Hadoop's {@code .NAME.crc} sidecar.
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
    if (overwriteIfPossible || !createOnce) {
      return super.createAtomic(path, overwriteIfPossible);
    }
    try {
      return new CreateOnceStream(PendingFile.open(fs(), path, true), path);
    } catch (IOException e) {
      throw new UncheckedIOException(e);  // the interface declares none; Spark fails the batch either way
    }
  }

  /**
   * The stream Spark writes a commit point through: close() publishes, cancel() discards. Spark calls cancel() after
   * a failed close() too (HDFSMetadataLog.write), so either runs at most once and the other is then a no-op.
   */
  private static final class CreateOnceStream extends CheckpointFileManager.CancellableFSDataOutputStream {

    private final PendingFile file;
    private final Path path;
    private boolean terminated;

    CreateOnceStream(PendingFile file, Path path) {
      super(file);
      this.file = file;
      this.path = path;
    }

    @Override
    public synchronized void close() throws IOException {
      if (terminated) {
        return;
      }
      terminated = true;
      try {
        file.publish();
      } catch (java.nio.file.FileAlreadyExistsException e) {
        FileAlreadyExistsException taken =
            new FileAlreadyExistsException(path + " already exists: another writer created it first");
        taken.initCause(e);
        throw taken;
      }
    }

    @Override
    public synchronized void cancel() {
      if (terminated) {
        return;
      }
      terminated = true;
      file.discard();
    }
  }
}
