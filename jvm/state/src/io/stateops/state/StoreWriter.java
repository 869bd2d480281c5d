package io.stateops.state;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider$;
import org.apache.spark.sql.execution.streaming.state.StateStoreProviderId;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Writes one state store's rows, as Spark's state reader reads them (key, value, partition_id), into another
 * provider's files at a given version, through that provider's own StateStore API: the store switch of
 * `stateops recover run JOB --mode switch-store` (stateops/recovery/store_switch.py, which reads, swaps and
 * journals).
 *
 * Spark 4.2's own state rewriter (StateRewriter) reads RocksDB state only and opens its target with
 * getStore(version, loadEmpty = true), which the in-memory (HDFS-backed) provider refuses; so this writer opens
 * each target the way its provider allows:
 * - RocksDB: an empty store at version - 1 (loadEmpty), committed with a forced snapshot: version.zip and its SST
 *   files, no changelog (RocksDB writes none for a store loaded empty).
 * - the in-memory store: a store at version 0, committed with a forced snapshot (1.delta, 1.snapshot), the snapshot
 *   then renamed to version.snapshot: a snapshot holds the map's rows only, not its version.
 * Each task writes the state partition its rows belong to (the reader reads one partition per task); partitions
 * without rows get an empty store, so that every partition has the version.
 */
public final class StoreWriter {
    private StoreWriter() {
    }

    /**
     * Write `rows` (the state reader's key, value and partition_id columns of one store) under `stateRoot` (a
     * checkpoint's state folder, or a scratch folder laid out as one) for store `storeName` of operator
     * `operatorId`, as `providerClass` at `version`, every partition of `numPartitions`. `prefixColumns` > 0: the
     * key's leading columns the operator scans by (session windows). Returns the rows written per partition.
     */
    public static long[] write(Dataset<Row> rows, String stateRoot, long operatorId, String storeName,
                               int prefixColumns, String providerClass, long version, int numPartitions)
            throws IOException {
        SparkSession spark = rows.sparkSession();
        StructType keySchema = (StructType) rows.schema().apply("key").dataType();
        StructType valueSchema = (StructType) rows.schema().apply("value").dataType();
        int partitionField = rows.schema().fieldIndex("partition_id");
        int keyField = rows.schema().fieldIndex("key");
        int valueField = rows.schema().fieldIndex("value");
        SQLConf sqlConf = spark.sessionState().conf().clone();
        sqlConf.setConfString(SQLConf.STATE_STORE_PROVIDER_CLASS().key(), providerClass);
        StateStoreConf storeConf = new StateStoreConf(sqlConf, scala.collection.immutable.Map$.MODULE$.empty());
        SerializableConfiguration hadoop = new SerializableConfiguration(spark.sessionState().newHadoopConf());
        Target target = new Target(stateRoot, operatorId, storeName, prefixColumns, keySchema, valueSchema, version,
                                   storeConf, hadoop);

        JavaRDD<InternalRow> source = rows.queryExecution().toRdd().toJavaRDD();
        List<long[]> written = source.mapPartitions((Iterator<InternalRow> it) -> {
            List<long[]> out = new ArrayList<>();
            if (!it.hasNext()) {
                return out.iterator();
            }
            UnsafeProjection keys = UnsafeProjection.create(target.keySchema);
            UnsafeProjection values = UnsafeProjection.create(target.valueSchema);
            InternalRow first = it.next();
            int partition = first.getInt(partitionField);
            Iterator<InternalRow> all = new Iterator<InternalRow>() {
                private InternalRow head = first;

                @Override
                public boolean hasNext() {
                    return head != null || it.hasNext();
                }

                @Override
                public InternalRow next() {
                    InternalRow row = head != null ? head : it.next();
                    head = null;
                    if (row.getInt(partitionField) != partition) {
                        throw new IllegalStateException("task " + TaskContext.getPartitionId() + " read partitions "
                                + partition + " and " + row.getInt(partitionField) + " of one state store");
                    }
                    return row;
                }
            };
            long count = target.write(partition, all, keys, values, keyField, valueField);
            out.add(new long[] {partition, count});
            return out.iterator();
        }).collect();

        long[] counts = new long[numPartitions];
        boolean[] seen = new boolean[numPartitions];
        for (long[] pair : written) {
            int partition = (int) pair[0];
            if (partition < 0 || partition >= numPartitions || seen[partition]) {
                throw new IllegalStateException("state partition " + partition + " is outside 0.." + (numPartitions - 1)
                        + " or was read twice");
            }
            seen[partition] = true;
            counts[partition] = pair[1];
        }
        for (int partition = 0; partition < numPartitions; partition++) {
            if (!seen[partition]) {
                target.write(partition, java.util.Collections.emptyIterator(), null, null, keyField, valueField);
            }
        }
        return counts;
    }

    /** One store's target: what each task needs to open and fill a partition's store (serializable). */
    private static final class Target implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        private static final String ROCKSDB =
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider";
        final String stateRoot;
        final long operatorId;
        final String storeName;
        final int prefixColumns;
        final StructType keySchema;
        final StructType valueSchema;
        final long version;
        final StateStoreConf storeConf;
        final SerializableConfiguration hadoop;

        Target(String stateRoot, long operatorId, String storeName, int prefixColumns, StructType keySchema,
               StructType valueSchema, long version, StateStoreConf storeConf, SerializableConfiguration hadoop) {
            this.stateRoot = stateRoot;
            this.operatorId = operatorId;
            this.storeName = storeName;
            this.prefixColumns = prefixColumns;
            this.keySchema = keySchema;
            this.valueSchema = valueSchema;
            this.version = version;
            this.storeConf = storeConf;
            this.hadoop = hadoop;
        }

        long write(int partition, Iterator<InternalRow> rows, UnsafeProjection keys, UnsafeProjection values,
                   int keyField, int valueField) throws IOException {
            boolean rocksdb = ROCKSDB.equals(storeConf.providerClass());
            Configuration conf = new Configuration(hadoop.value());
            StateStoreId id = new StateStoreId(stateRoot, operatorId, partition, storeName);
            KeyStateEncoderSpec spec = prefixColumns > 0
                ? new PrefixKeyScanStateEncoderSpec(keySchema, prefixColumns)
                : new NoPrefixKeyStateEncoderSpec(keySchema);
            StateStoreProvider provider = StateStoreProvider$.MODULE$.createAndInit(
                new StateStoreProviderId(id, UUID.randomUUID()), keySchema, valueSchema, spec, false, storeConf,
                conf, false, scala.Option.empty());
            long count = 0;
            try {
                StateStore store = rocksdb
                    ? provider.getStore(version - 1, scala.Option.empty(), true, true)
                    : provider.getStore(0, scala.Option.empty(), true, false);
                try {
                    if (keys == null && rows.hasNext()) {
                        keys = UnsafeProjection.create(keySchema);
                        values = UnsafeProjection.create(valueSchema);
                    }
                    while (rows.hasNext()) {
                        InternalRow row = rows.next();
                        store.put(keys.apply(row.getStruct(keyField, keySchema.length())).copy(),
                                  values.apply(row.getStruct(valueField, valueSchema.length())).copy(),
                                  StateStore.DEFAULT_COL_FAMILY_NAME());
                        count++;
                    }
                    store.commit();
                } finally {
                    if (!store.hasCommitted()) {
                        store.abort();
                    }
                }
            } finally {
                provider.close();
            }
            if (!rocksdb && version != 1) {  // the snapshot of version 1 becomes the snapshot of `version`
                Path folder = new Path(id.storeCheckpointLocation().toString());
                FileSystem fs = folder.getFileSystem(conf);
                Path snapshot = new Path(folder, version + ".snapshot");
                fs.delete(snapshot, false);
                if (!fs.rename(new Path(folder, "1.snapshot"), snapshot)) {
                    throw new IOException("could not rename " + folder + "/1.snapshot to " + snapshot);
                }
                fs.delete(new Path(folder, "1.delta"), false);
            }
            return count;
        }
    }
}
