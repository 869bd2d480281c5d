"""`stateops jars fetch [--dest DIR]`: the pinned JVM jars (Delta's Spark writer, the Kafka connector, S3A) fetched
with Maven and verified against the checksums shipped in the wheel (stateops.jvm.jars)."""
from __future__ import annotations

import click

from stateops.jvm.jars import JarsFolder, fetch, summary


@click.group("jars")
def jars_group() -> None:
    """The JVM jars StateOps adds to Spark's own."""


@jars_group.command("fetch")
@click.option("--dest", default=None, metavar="DIR",
              help="Folder for the jars. [default: STATEOPS_JARS, else a per-user cache folder keyed by the "
                   "coordinates]")
def jars_fetch(dest: str | None) -> None:
    """Fetch the pinned jars with Maven, verify their checksums, and print where they are."""
    done = fetch(dest or JarsFolder.of().path, echo=lambda line: click.echo(line, err=True))
    click.echo(summary(done))
