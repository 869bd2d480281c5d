"""The streaming jobs: specs, sources, transformations, sinks, the Spark session factory and the runner."""
