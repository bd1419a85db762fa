"""The CLIP zero-shot oracle (paper Sec. 3.2 and Sec. 4), one job a module: ``oracle`` (:class:`CLIPOracle`, the
judge), ``prompts`` (templates, the zero-shot head and its disk cache), ``loading`` (the open_clip model and its
weights). ``oracles.clip.CLIPOracle`` is the name configs use (``_target_``)."""

from oracles.clip.oracle import PRECISIONS, CLIPOracle
from oracles.clip.prompts import PAPER_TEMPLATE, PROMPT_CACHE, TEMPLATE_SETS, fill_template, named_templates

__all__ = [
    "PAPER_TEMPLATE",
    "PRECISIONS",
    "PROMPT_CACHE",
    "TEMPLATE_SETS",
    "CLIPOracle",
    "fill_template",
    "named_templates",
]
