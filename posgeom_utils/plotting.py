"""One figure style for the whole book. Chapter: *Positions in real text*."""

from __future__ import annotations

from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

#: the book's palette (colour-blind safe, Okabe-Ito)
PALETTE = [
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#F0E442",
    "#000000",
]
#: one colour per corpus, the same in every chapter
CORPUS_COLORS = {"sst2": PALETTE[0], "imdb": PALETTE[1], "synthetic": PALETTE[2]}
STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "figure.figsize": (7.0, 3.6),
    "grid.alpha": 0.3,
}
STYLE |= {
    "figure.constrained_layout.use": True,
    "axes.prop_cycle": mpl.cycler(color=PALETTE),
}
STYLE |= {"axes.spines.top": False, "axes.spines.right": False, "axes.grid": True}
STYLE |= {
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
}
STYLE |= {"legend.fontsize": 9, "legend.frameon": False, "image.cmap": "viridis"}


def figure(
    nrows: int = 1,
    ncols: int = 1,
    width: float = 7.0,
    height: float | None = None,
    **kwargs: Any,
) -> tuple[plt.Figure, Any]:
    """A new figure in the book's style. Chapter: *Positions in real text*."""
    mpl.rcParams.update(STYLE)
    height = 3.2 * nrows if height is None else height
    return plt.subplots(nrows, ncols, figsize=(width, height), **kwargs)


def heatmap(
    ax: plt.Axes,
    M: np.ndarray,
    title: str = "",
    label: str = "",
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str = "viridis",
    extent_start: int = 0,
) -> Any:
    """A positions x positions matrix. Chapter: *Positions in real text*."""
    M = np.asarray(M)
    lo, hi = extent_start - 0.5, extent_start + M.shape[0] - 0.5
    style = {"vmin": vmin, "vmax": vmax, "cmap": cmap, "interpolation": "nearest"}
    im = ax.imshow(M, extent=(lo, hi, hi, lo), origin="upper", **style)
    ax.grid(False)
    ax.set(xlabel="position j", ylabel="position i")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, shrink=0.85, label=label)
    return im
