"""The JVM jars StateOps adds to pyspark's own: pinned coordinates and checksums shipped in the wheel, fetched with
Maven (stateops.jvm.jars)."""
