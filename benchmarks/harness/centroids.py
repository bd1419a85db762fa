"""A settled benchmark's toys: nearest-centroid digits classifiers (registered as ``kind=config`` names by
:data:`CENTROIDS`) and :func:`centroid_build`, which turns a ``digits_settled`` job's config into tiny components.
Shared by ``benchmarks/service_attack_scenarios.py`` and the settled-service tests (``tests/support/service.py``)."""

from __future__ import annotations

import torch

from benchmarks.harness.toys import ModelOracle, SigmoidGenerator


class CentroidClassifier(torch.nn.Module):
    """A nearest-centroid digits classifier (a linear layer on the 16-px train split's class means, SA about 97%),
    its centroids moved by Gaussian ``noise`` (seeded by ``seed``): noise 0 is the settled tests' oracle, noise 0.5 a
    model with an FMR_v about 50 points lower; two of equal noise and seed are the same model."""

    def __init__(self, noise: float = 0.0, seed: int = 0, in_features: int = 256, num_classes: int = 10) -> None:
        super().__init__()
        from genEval.data.standard import DigitsData

        train = DigitsData(split="train", image_size=16, channels=1)
        x = torch.stack([train[i][0] for i in range(len(train))]).flatten(1)
        y = torch.tensor([train[i][1] for i in range(len(train))])
        mu = torch.stack([x[y == c].mean(0) for c in range(num_classes)])
        w = mu + noise * torch.randn(mu.shape, generator=torch.Generator().manual_seed(seed))
        self.l = torch.nn.Linear(in_features, num_classes)
        with torch.no_grad():  # argmax of -|x - w|^2 / 2, sharpened
            self.l.weight.copy_(10 * w)
            self.l.bias.copy_(-5 * (w * w).sum(1))
        self.num_classes, self.name = num_classes, f"centroid(noise={noise}, seed={seed})"

    def forward(self, x):
        return self.l(x.flatten(1))


#: The settled tests' registered classifier configs (``kind=config`` names): ``builds`` reads noise and seed.
CENTROIDS = {
    "sharp": {"_target_": "benchmarks.harness.centroids.CentroidClassifier", "noise": 0.0, "seed": 0},
    "blurred": {"_target_": "benchmarks.harness.centroids.CentroidClassifier", "noise": 0.5, "seed": 1},
}


def centroid_build(config: dict):
    """A job config of the digits_settled benchmark -> tiny components: its data as configured (a class-balanced
    draw of ``data.limit`` images with the run's seed), the job's centroid classifier, an exact sigmoid latent space
    and the noise-0 centroid classifier as the oracle; the preset's search with a step that moves logit latents."""
    from genEval.data.standard import DigitsData
    from genEval.search.perturb import SearchConfig
    from genEval.service.execute import Components

    cls = {k: v for k, v in config["classifier"].items() if k != "_target_"}
    data = {k: v for k, v in config["data"].items() if k != "_target_"}
    return Components(
        classifier=CentroidClassifier(**cls),
        data=DigitsData(**data),
        generator=SigmoidGenerator(),
        oracle=ModelOracle(CentroidClassifier()),
        search=SearchConfig.coerce({**config["search"], "step_size": 1.0}),
        mask=None,
    )
