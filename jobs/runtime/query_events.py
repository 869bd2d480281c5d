"""Spark's streaming query events, handed to Python as plain data at the cost of one Py4J call each.

PySpark's own listener bridge converts every event into Python objects field by field before a listener sees
it (`QueryProgressEvent.fromJObject`: a Py4J round trip per field, per state operator and per source, some of
which resolve class names by scanning every jar on the driver's class path). Measured on Spark 4.2 with
user_activity (two queries, two progress events per micro-batch) on a busy 2-core machine: 0.9-2.9 s of the
listener thread per progress event, the driver's CPU spent in class-path lookups (JFR: 48 of 58 samples of
the listener thread), and the end of a run waits for those events. `JsonEvents` receives the Java event
itself and asks it for what the listener reads: the progress as JSON (one call), the run id and name of a
started query, the ids and time of an idle one.
"""
from __future__ import annotations

import json
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener


class JsonEvents(StreamingQueryListener):
    """A streaming query listener that takes each event as plain data: override `started`, `progressed`
    and `idle`. Registered with `spark.streams.addListener` / `removeListener` like any listener; where
    PySpark hands it converted events instead (Spark Connect), the same methods get the same data."""

    def started(self, run_id: str, name: str | None) -> None:
        """A query of this session started."""

    def progressed(self, progress: dict[str, Any]) -> None:
        """A micro-batch ended: Spark's progress report, as `StreamingQueryProgress.json` has it."""

    def idle(self, query_id: str, run_id: str, timestamp: str) -> None:
        """A query found nothing new to read (Spark 4: every noDataProgressEventInterval)."""

    @property
    def _jlistener(self):
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext

            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(  # type: ignore[union-attr]
                _JavaEvents(self))
        return self._jlistenerobj

    def onQueryStarted(self, event) -> None:
        self.started(str(event.runId), event.name)

    def onQueryProgress(self, event) -> None:
        self.progressed(json.loads(event.progress.json))

    def onQueryIdle(self, event) -> None:
        self.idle(str(event.id), str(event.runId), event.timestamp)

    def onQueryTerminated(self, event) -> None:
        pass


class _JavaEvents:
    """Implements Spark's Java listener interface for Py4J: the Java events, read with one call per value."""

    def __init__(self, listener: JsonEvents):
        self.listener = listener

    def onQueryStarted(self, jevent) -> None:
        self.listener.started(jevent.runId().toString(), jevent.name())

    def onQueryProgress(self, jevent) -> None:
        self.listener.progressed(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent) -> None:
        self.listener.idle(jevent.id().toString(), jevent.runId().toString(), jevent.timestamp())

    def onQueryTerminated(self, jevent) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
