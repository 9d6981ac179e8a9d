"""The benchmark harness (part of the lab: ``pip install ./lab``)."""

from __future__ import annotations

LAB_HINT = "plots need matplotlib, a dependency of the lab: pip install ./lab"


def agg_figure():
    """(Figure, FigureCanvasAgg) from matplotlib, imported only when a plot is drawn; a
    one-line HostctlError naming the lab when matplotlib is not installed (a training
    host installs hostctl without the lab)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        from hostctl.errors import ProbeError

        raise ProbeError(LAB_HINT) from None
    return Figure, FigureCanvasAgg
