"""The picture of a style mask (``style_mask.png`` beside every fitted mask; ``geneval fit-mask`` writes one too).

matplotlib is imported inside :func:`plot_style_mask`, so that a run without a mask does not pay for it.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from genEval.fileio import atomic_write_bytes
from genEval.masks.format import StyleMask


def plot_style_mask(mask: StyleMask, path: str | Path) -> Path:
    """PNG summary of a mask, written atomically: (a) selected dims per latent channel, (b) a heat map of the
    number of selected channels at each spatial position, (c) a histogram of the non-zero coefficients."""
    # slow imports, see the module docstring
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    m = mask.mask.numpy()
    if m.ndim == 1:
        m = m.reshape(-1, 1, 1)
    elif m.ndim == 2:
        m = m[:, None, :]
    elif m.ndim > 3:
        m = m.reshape(m.shape[0], m.shape[1], -1)
    per_channel = m.sum(axis=(1, 2))
    spatial = m.sum(axis=0)
    nz = mask.coef.numpy()[mask.mask.numpy()]

    fig = Figure(figsize=(13, 4), dpi=100)
    FigureCanvasAgg(fig)  # attaches an Agg canvas: no pyplot, no global backend switch
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    ax_a.bar(np.arange(len(per_channel)), per_channel, color="tab:blue")
    ax_a.set_xlabel("latent channel")
    ax_a.set_ylabel("selected dims")
    ax_a.set_title(f"(a) style dims per channel ({mask.n_selected}/{mask.n_dims})")
    im = ax_b.imshow(spatial, cmap="viridis", interpolation="nearest", vmin=0)
    fig.colorbar(im, ax=ax_b, label="selected channels", ticks=MaxNLocator(integer=True))
    ax_b.set_title("(b) selected channels per position")
    ax_b.set_xlabel("x")
    ax_b.set_ylabel("y")
    if nz.size:
        ax_c.hist(nz, bins=min(50, max(5, nz.size // 2)), color="tab:orange")
    else:
        ax_c.text(0.5, 0.5, "no non-zero coefficients", ha="center", va="center", transform=ax_c.transAxes)
    ax_c.set_xlabel("coefficient (standardised latents)")
    ax_c.set_ylabel("count")
    ax_c.set_title("(c) non-zero coefficients")
    fig.suptitle(
        f"style mask: {mask.generator} on {mask.dataset}, sparsity {mask.sparsity:.2f}%, held-out "
        f"{mask.heldout_accuracy:.1f}%, C={mask.C:.3g} ({mask.solver})",
        fontsize=10,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(p, buf.getvalue())
    return p
