"""Where a micro-batch's time goes (`stateops jobs profile`):

  parts.py    a batch's duration split into parts that add up to it, from Spark's progress event and the
              batch writer's own laps (Laps)
  report.py   the recorded batches of a job as profiles (the progress table, no JVM), and their text
"""
