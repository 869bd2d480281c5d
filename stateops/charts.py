"""One chart style for StateOps' PNG charts (the audits', retention's): a fixed size, a display-less backend,
byte axes in binary units. matplotlib is the `charts` extra, imported when a chart is drawn."""
from __future__ import annotations

import io

from stateops.extras import require
from stateops.sizes import human_bytes

DPI = 100
FIGSIZE = (9.0, 4.0)  # inches
PNG_SIZE = (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))  # (width, height) in pixels


def figure(panels: int):
    require("charts", "drawing a chart")
    import matplotlib

    matplotlib.use("Agg", force=False)  # a display-less backend; a no-op if Agg is already selected
    from matplotlib.figure import Figure  # a Figure without pyplot: no global state, thread-safe

    cols = min(panels, 3)
    rows = (panels + cols - 1) // cols
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for extra in axes[panels:]:
        extra.set_visible(False)
    return fig, axes[:panels]


def png(fig) -> bytes:
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=DPI)  # no bbox_inches="tight": the size stays PNG_SIZE
    return out.getvalue()


def bytes_axis(ax) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: human_bytes(v)))
