"""The classifier's confidence on images of classes outside its label set (``ood_data=<imagefolder>``; S2: Hendrycks
et al. 2021, ImageNet-O; docs/scores.md, "Confidence").

:func:`ood_confidence` runs the tested classifier (no search, no oracle) over every image of an OOD data set and
returns its maximum softmax probability per image; the run's summary scores -MSP of these images against the clean
test images (AUPR, AUROC: :func:`genEval.scores.confidence.run_confidence`). The images are read in position order,
``batch_size`` at a time, so the numbers do not depend on the batch size beyond float noise.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import torch

from genEval.interfaces import ImageDataset, component_id

log = logging.getLogger(__name__)

#: Decimals of the MSPs kept in results.json (as the records keep theirs).
DECIMALS = 6


def ood_confidence(classifier: Any, data: ImageDataset, device: torch.device, batch_size: int) -> dict[str, Any]:
    """``{"data": id, "n": N, "sha256": hash of the source ids, "msp": [N floats]}``: the classifier's top-1 softmax
    probability on every image of ``data`` (float images (C, H, W) in [0, 1], all of one size)."""
    n = len(data)
    if n == 0:
        raise ValueError(f"ood_data {component_id(data)} holds no images; point ood_data at a folder of images.")
    msp: list[float] = []
    ids: list[str] = []
    with torch.no_grad():
        for start in range(0, n, batch_size):
            items = [data[i] for i in range(start, min(n, start + batch_size))]
            x = torch.stack([it[0] for it in items]).to(device)
            msp += classifier(x).float().softmax(1).amax(1).cpu().tolist()
            ids += [str(it[2]) for it in items]
    log.info("ood_data %s: the classifier's confidence on %d images outside its classes", component_id(data), n)
    return {
        "data": component_id(data),
        "n": n,
        "sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
        "msp": [round(float(v), DECIMALS) for v in msp],
    }
