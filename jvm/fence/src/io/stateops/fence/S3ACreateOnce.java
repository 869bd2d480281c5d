package io.stateops.fence;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.AWSServiceIOException;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;

/**
 * Create-once on S3 through S3A (hadoop-aws 3.4.2 or later): createFile() with the mandatory option
 * fs.option.create.conditional.overwrite makes S3A send the object's PUT (or CompleteMultipartUpload) in close()
 * with {@code If-None-Match: *}, so that S3 stores it only if the key is absent, atomically. Plain create(path,
 * false), which Spark and Delta call, is not conditional in any configuration: it is a HEAD, then an unconditional
 * PUT.
 *
 * <p>A refusal is a 412, which S3A turns into RemoteFileChangedException, or a 409 (another conditional write to the
 * key in flight), an AWSServiceIOException; S3A retries neither. A 412 is ambiguous in one case: the SDK retried a
 * PUT whose first attempt landed but whose answer was lost. So each attempt carries a write id in the object's
 * metadata ({@code x-amz-meta-stateops-write-id}), read back on a refusal: the write counts as this writer's if the
 * object carries its id, and as lost otherwise, or when the id cannot be read (fail closed).
 */
final class S3ACreateOnce extends PendingFile {

  static final String CONDITIONAL = "fs.option.create.conditional.overwrite";
  static final String WRITE_ID = "stateops-write-id";

  private final FileSystem fs;
  private final Path path;
  private final String writeId;
  private final FSDataOutputStream out;
  private boolean finished;

  private S3ACreateOnce(FileSystem fs, Path path, String writeId, FSDataOutputStream out) {
    this.fs = fs;
    this.path = path;
    this.writeId = writeId;
    this.out = out;
  }

  static S3ACreateOnce open(FileSystem fs, Path path) throws IOException {
    if (!fs.hasPathCapability(path, CONDITIONAL)) {
      throw new IOException(path + ": this S3A file system has conditional creation turned off"
          + " (fs.s3a.create.conditional.enabled=false), so its commit points cannot be made create-once");
    }
    String writeId = UUID.randomUUID().toString();
    FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path);
    builder.overwrite(false);
    builder.must(CONDITIONAL, true);
    builder.opt("fs.s3a.create.header." + WRITE_ID, writeId);
    return new S3ACreateOnce(fs, path, writeId, builder.build());
  }

  @Override
  public void write(int b) throws IOException {
    out.write(b);
  }

  @Override
  public void write(byte[] b, int off, int len) throws IOException {
    out.write(b, off, len);
  }

  @Override
  public void flush() throws IOException {
    out.flush();
  }

  @Override
  void publish() throws IOException {
    finished = true;
    try {
      out.close();  // the conditional PUT; a failed one is cleaned up by S3A before it throws
    } catch (IOException e) {
      if (!refused(e)) {
        throw e;
      }
      if (landedByUs()) {
        return;
      }
      java.nio.file.FileAlreadyExistsException taken = new java.nio.file.FileAlreadyExistsException(path.toString());
      taken.initCause(e);
      throw taken;
    }
  }

  /** abort() uploads nothing of a stream not yet closed. */
  @Override
  void discard() {
    if (finished) {
      return;
    }
    finished = true;
    try {
      out.abort();
    } catch (RuntimeException e) {
      // At worst an incomplete multipart upload is left, invisible to readers (S3A purges those by age).
    }
  }

  private static boolean refused(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof RemoteFileChangedException) {
        return true;
      }
      if (t instanceof AWSServiceIOException) {
        int status = ((AWSServiceIOException) t).statusCode();
        if (status == 412 || status == 409) {
          return true;
        }
      }
    }
    return false;
  }

  private boolean landedByUs() {
    try {
      byte[] id = fs.getXAttr(path, "header." + WRITE_ID);  // S3A's view of x-amz-meta-stateops-write-id
      return id != null && writeId.equals(new String(id, StandardCharsets.UTF_8));
    } catch (IOException e) {
      return false;
    }
  }
}
