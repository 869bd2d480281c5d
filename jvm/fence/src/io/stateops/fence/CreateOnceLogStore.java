package io.stateops.fence;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

import io.delta.storage.S3SingleDriverLogStore;

/**
 * Delta's log store with create-once commits, on a local disk and on S3 through S3A.
 *
 * <p>A Delta commit is {@code write(_delta_log/N.json, actions, overwrite=false)}. Delta's stock stores make it
 * exclusive only inside one JVM (LocalLogStore's lock, S3SingleDriverLogStore's path lock) and then check and rename
 * or PUT, so a second driver, such as a stale one resuming after it lost its job's lease, can replace a commit.
 * Here the name is taken once, atomically in the store ({@link PendingFile}), across processes and machines; the
 * loser gets java.nio.file.FileAlreadyExistsException, Delta's signal for a lost race: it reads the winning commit
 * and checks for conflicts (a second run of the same streaming query then fails on the shared transaction id).
 *
 * <p>No commit is written under a revoked folder ({@link Revocations}: the run lost its job's lease).
 *
 * <p>Reads, listings and {@code overwrite=true} writes (_last_checkpoint) are S3SingleDriverLogStore's, as are all
 * writes on other file systems. Delta builds it by reflection with this constructor, for each scheme configured:
 * {@code spark.delta.logStore.file.impl}, {@code .s3a.impl} and {@code .s3.impl} (s3:// served by S3A).
 */
public class CreateOnceLogStore extends S3SingleDriverLogStore {

  public CreateOnceLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    Revocations.check(path);
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (overwrite || !PendingFile.supports(fs)) {
      super.write(path, actions, overwrite, hadoopConf);
      return;
    }
    try (PendingFile file = PendingFile.open(fs, path, false)) {
      while (actions.hasNext()) {
        file.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
      Revocations.check(path);  // the run may have lost its lease while the commit was being written
      file.publish();
    }
  }

  /**
   * Whether a file written in place can be seen half-written, which makes Delta write its checkpoints through a
   * temp file: on a local disk yes (as LocalLogStore says), on S3 no (an object appears whole), elsewhere, or when
   * the file system cannot be told, yes (the safe answer).
   */
  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    try {
      return !PendingFile.isS3A(path.getFileSystem(hadoopConf));
    } catch (IOException e) {
      return true;
    }
  }
}
