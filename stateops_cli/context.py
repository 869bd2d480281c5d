"""What every `stateops` command is handed: the layout and config path from --home/--config (else the
environment, stateops.environment), and the catalog, loaded on first use and kept: once per invocation."""
from __future__ import annotations

from dataclasses import dataclass, field

from stateops.layout import Layout

from jobs.catalog import Catalog


@dataclass
class CliContext:
    layout: Layout
    config_path: str | None
    _catalog: Catalog | None = field(default=None, repr=False)

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = Catalog.load(self.layout, self.config_path)
        return self._catalog
