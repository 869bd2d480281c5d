import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CyclicBarrier;
import java.util.function.IntFunction;
import java.util.stream.Stream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

import io.delta.storage.LogStore;
import io.stateops.fence.CreateOnceCheckpointFileManager;
import io.stateops.fence.CreateOnceLogStore;

/**
 * Two writers race for the same commit points on a local disk, as two drivers of one checkpoint or one Delta table
 * would (tests/spark/test_fence_jar.py): for each trial, two threads with their own manager or log store start
 * together on a fresh name. Prints one line per kind of commit point:
 *
 * <pre>KIND trials=N one-winner=N content-ok=N leftovers=N loser=EXCEPTION_CLASS:COUNT[,...]</pre>
 *
 * content-ok counts the trials whose file holds exactly the winner's bytes; leftovers counts every other file left in
 * the folder (temp files, checksum sidecars). Usage: FenceRace FOLDER TRIALS.
 */
public final class FenceRace {

  interface Write {
    void run(int writer, int trial) throws Exception;
  }

  public static void main(String[] args) throws Exception {
    java.nio.file.Path root = java.nio.file.Paths.get(args[0]);
    int trials = Integer.parseInt(args[1]);
    Configuration conf = new Configuration();

    java.nio.file.Path offsetsDir = Files.createDirectories(root.resolve("checkpoint/offsets"));
    Path offsets = new Path(offsetsDir.toUri());
    CheckpointFileManager[] managers = {
        new CreateOnceCheckpointFileManager(offsets, conf), new CreateOnceCheckpointFileManager(offsets, conf)};
    race("checkpoint", offsetsDir, trials, String::valueOf, FenceRace::payload, (writer, trial) -> {
      // what HDFSMetadataLog.write does: createAtomic(false), write, close; cancel on any error
      CheckpointFileManager.CancellableFSDataOutputStream out =
          managers[writer].createAtomic(new Path(offsets, String.valueOf(trial)), false);
      try {
        out.write(payload(writer, trial));
        out.close();
      } catch (IOException | RuntimeException e) {
        out.cancel();
        throw e;
      }
    });

    java.nio.file.Path logDir = Files.createDirectories(root.resolve("table/_delta_log"));
    Path log = new Path(logDir.toUri());
    LogStore[] stores = {new CreateOnceLogStore(conf), new CreateOnceLogStore(conf)};
    race("log", logDir, trials, FenceRace::commitName, FenceRace::payload, (writer, trial) ->
        stores[writer].write(new Path(log, commitName(trial)), lines(writer, trial), false, conf));
  }

  static String commitName(int trial) {
    return String.format("%020d.json", trial);
  }

  /** About 64 KiB, so that the two writes overlap; the same bytes for the checkpoint file and the log's lines. */
  static byte[] payload(int writer, int trial) {
    StringBuilder text = new StringBuilder();
    for (int line = 0; text.length() < 65536; line++) {
      text.append("{\"writer\":").append(writer).append(",\"trial\":").append(trial).append(",\"line\":")
          .append(line).append("}\n");
    }
    return text.toString().getBytes(StandardCharsets.UTF_8);
  }

  static Iterator<String> lines(int writer, int trial) {
    return Arrays.asList(new String(payload(writer, trial), StandardCharsets.UTF_8).split("\n")).iterator();
  }

  interface Payload {
    byte[] of(int writer, int trial);
  }

  static void race(String kind, java.nio.file.Path dir, int trials, IntFunction<String> name, Payload payload,
      Write write) throws Exception {
    int oneWinner = 0;
    int contentOk = 0;
    Map<String, Integer> losers = new TreeMap<>();
    for (int trial = 0; trial < trials; trial++) {
      CyclicBarrier start = new CyclicBarrier(2);
      Throwable[] outcome = new Throwable[2];
      Thread[] threads = new Thread[2];
      for (int w = 0; w < 2; w++) {
        int writer = w;
        int t = trial;
        threads[w] = new Thread(() -> {
          try {
            start.await();
            write.run(writer, t);
          } catch (Throwable e) {
            outcome[writer] = e;
          }
        });
        threads[w].start();
      }
      for (Thread thread : threads) {
        thread.join();
      }
      int winner = outcome[0] == null ? 0 : 1;
      if ((outcome[0] == null) != (outcome[1] == null)) {
        oneWinner++;
        losers.merge(outcome[1 - winner].getClass().getName(), 1, Integer::sum);
      }
      byte[] found = Files.readAllBytes(dir.resolve(name.apply(trial)));
      if (Arrays.equals(found, payload.of(winner, trial))) {
        contentOk++;
      }
    }
    long leftovers;
    try (Stream<java.nio.file.Path> files = Files.list(dir)) {
      leftovers = files.filter(f -> f.getFileName().toString().startsWith(".")).count();
    }
    StringBuilder loser = new StringBuilder();
    losers.forEach((cls, count) -> loser.append(loser.length() == 0 ? "" : ",").append(cls).append(':').append(count));
    System.out.printf("%s trials=%d one-winner=%d content-ok=%d leftovers=%d loser=%s%n", kind, trials, oneWinner,
        contentOk, leftovers, loser);
  }
}
