package io.stateops.fence;

import java.io.BufferedOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.UUID;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Create-once on a local disk. The bytes go to a hidden temp file beside the target ({@code .NAME.UUID.tmp}, the
 * name Spark's and Delta's own temp files have, which StateOps' retention already recognises), which is fsync'ed
 * and then hard-linked to the final name. link(2) fails with EEXIST when the name exists, atomically in the kernel,
 * so of any number of writers, threads or processes, exactly one wins, and the final name never shows a partial
 * file. A rename would not do: rename(2) replaces the target, and Java's Files.move checks before it renames.
 *
 * <p>Needs a file system with hard links (ext4, xfs, btrfs, tmpfs, APFS do; vfat and some network or FUSE mounts do
 * not): there the link fails with an IOException, and the commit with it, rather than losing the guarantee.
 */
final class LocalCreateOnce extends PendingFile {

  private final java.nio.file.Path target;
  private final java.nio.file.Path temp;
  private final FileChannel channel;
  private final OutputStream buffer;
  private boolean finished;

  private LocalCreateOnce(java.nio.file.Path target, java.nio.file.Path temp, FileChannel channel) {
    this.target = target;
    this.temp = temp;
    this.channel = channel;
    this.buffer = new BufferedOutputStream(Channels.newOutputStream(channel));
  }

  static LocalCreateOnce open(FileSystem fs, Path path, boolean createParents) throws IOException {
    java.nio.file.Path target = Paths.get(fs.makeQualified(path).toUri());
    if (createParents) {
      Files.createDirectories(target.getParent());
    }
    java.nio.file.Path temp =
        target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
    try {
      return new LocalCreateOnce(target, temp,
          FileChannel.open(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE));
    } catch (NoSuchFileException e) {
      FileNotFoundException missing = new FileNotFoundException("No such file or directory: " + target.getParent());
      missing.initCause(e);
      throw missing;
    }
  }

  @Override
  public void write(int b) throws IOException {
    buffer.write(b);
  }

  @Override
  public void write(byte[] b, int off, int len) throws IOException {
    buffer.write(b, off, len);
  }

  @Override
  public void flush() throws IOException {
    buffer.flush();
  }

  /**
   * fsync the temp file, link it to the target, unlink the temp, fsync the directory: once this returns, the
   * commit point survives a crash of the machine. A crash between link and unlink leaves only a hidden temp file.
   */
  @Override
  void publish() throws IOException {
    finished = true;
    try {
      buffer.flush();
      channel.force(true);
      channel.close();
      Files.createLink(target, temp);  // java.nio.file.FileAlreadyExistsException when the name is taken
    } finally {
      quietly(channel::close);
      quietly(() -> Files.deleteIfExists(temp));
    }
    // Hadoop's checksummed reader checks a file against its .NAME.crc when there is one; this file has none, so a
    // sidecar left by an earlier file of this name (removed without it) would make every read of it fail.
    Files.deleteIfExists(target.resolveSibling("." + target.getFileName() + ".crc"));
    try (FileChannel dir = FileChannel.open(target.getParent(), StandardOpenOption.READ)) {
      dir.force(true);  // the new name itself is durable
    } catch (IOException e) {
      // Some file systems refuse to fsync a directory: the name's durability is then theirs, as for any file.
    }
  }

  @Override
  void discard() {
    if (finished) {
      return;
    }
    finished = true;
    quietly(channel::close);
    quietly(() -> Files.deleteIfExists(temp));
  }

  private interface Step {
    void run() throws IOException;
  }

  /** A clean-up step whose failure must not hide the error being reported: a left temp file is hidden and inert. */
  private static void quietly(Step step) {
    try {
      step.run();
    } catch (IOException e) {
      // nothing to add to the outcome already decided
    }
  }
}
