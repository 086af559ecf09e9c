"""The figures' backend and house style, set once for every module that draws (a utility): import
``plt`` from here, never ``matplotlib.pyplot`` itself, so that no module can draw before the
file-only backend is chosen or with another style.

- backend ``Agg``: every figure is a file (PNG), drawn the same with or without a display;
- :data:`HOUSE_STYLE`: light grids, no top and right spines, legends without frames, and 110 dots
  per inch where a module does not choose its own.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

HOUSE_STYLE = {
    "savefig.dpi": 110,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
}
"""The rcParams every figure of the project is drawn with."""

plt.rcParams.update(HOUSE_STYLE)

__all__ = ["HOUSE_STYLE", "plt"]
