"""The names of :mod:`genEval.masks` where configs and notebooks have always found them.

``conf/mask/*.yaml`` name ``genEval.style_mask.NoMask`` / ``SparseMask`` / ``AutoMask`` as their ``_target_``, and
the service's benchmark versions hash those spellings, so they stay; the code lives in :mod:`genEval.masks` (the
fit, the file format, the configs and the figure, one module each). This module only re-exports.
"""

from genEval.masks import *  # noqa: F403 (every public name of genEval.masks, under its old path)
from genEval.masks import __all__  # noqa: F401
