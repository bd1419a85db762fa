"""The names of :mod:`genEval.masks` where configs and notebooks have always found them.

Notebooks and older configs name ``genEval.style_mask.NoMask`` / ``SparseMask`` / ``AutoMask``; the code lives in
:mod:`genEval.masks` (the fit, the file format, the configs and the figure, one module each), which
``conf/mask/*.yaml`` name since a benchmark is versioned by its canonical spec (a benchmark's version names a
component without its import path, so no version depends on this module any more). This module only re-exports.
"""

from genEval.masks import *  # noqa: F403 (every public name of genEval.masks, under its old path)
from genEval.masks import __all__  # noqa: F401
