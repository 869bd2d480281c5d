"""Changing a stateful query and keeping its state: the shapes of two queries' state compared, every change
classified (native, exact, partial, impossible), and the rewrite of the old state into the new query's as data."""
