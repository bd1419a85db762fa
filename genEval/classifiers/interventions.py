"""Robustness interventions as training recipes for the offline digits models: the paper's Table 2 in miniature.

The paper compares ImageNet ResNet-50s that differ only in how they were trained (ANT, SIN, AugMix, DeepAugment,
adversarial training; Table 2). :func:`digits_intervention` does the same for the small digits CNN of
:mod:`genEval.classifiers.digits`: one architecture, one optimiser and schedule, the same +-1 px shifts, and one
training objective per recipe, trained on first use and cached like the digits models
(``cache_dir("digits_interventions")``, keyed by every setting of the recipe):

* ``erm``: standard training, the cross-entropy of the clean batch (the baselines effective robustness is
  fitted on; ``train_fraction`` < 1 gives standard models of lower accuracy, which spread the baselines along
  the accuracy axis as Taori et al. 2020 do with many standard models).
* ``gaussian_noise``: Gaussian noise augmentation after Rusak et al., "A simple way to make neural networks
  robust against diverse image corruptions" (ECCV 2020; GNT_mult): a share ``clean_share`` of each batch stays
  clean, the rest gets ``x + sigma * N(0, 1)`` clipped to ``[0, 1]`` with ``sigma`` drawn per image from
  ``noise_stds`` (their ImageNet-C severities). The paper's ANT rows are the adversarial variant of this family.
* ``pgd``: adversarial training after Madry et al., "Towards deep learning models resistant to adversarial
  attacks" (ICLR 2018): every batch is replaced by its L-inf PGD adversary in pixel space (``eps``,
  ``step_size``, ``steps``, uniform random start), the DAT row's family.
* ``augmix``: AugMix after Hendrycks et al., "AugMix: a simple data processing method to improve robustness and
  uncertainty" (ICLR 2020): two augmented views from torchvision's :class:`~torchvision.transforms.AugMix`
  (chains of operations mixed with Dirichlet weights, then with the original by a Beta weight; ``all_ops=False``
  as in the reference code, which leaves out operations that overlap with ImageNet-C) and the Jensen-Shannon
  consistency loss between the clean and the two augmented predictions (weight ``jsd_weight``, 12 in the paper).
  torchvision draws the chain's operations once per call, so they are drawn per group of ``augmix_group``
  images (mixing weights stay per image): per-image calls cost 6x more on a CPU.
* ``augmix_noise``: AugMix views with Gaussian noise on top (a combination of two interventions, like the
  paper's DeepAugment+AugMix row).

The recipes' own random draws (noise, PGD start, AugMix) use the training run's seeded generator or the forked,
seeded global RNG, so a recipe trains the same model every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from genEval.checkpoints import cache_dir
from genEval.classifiers.base import ImageClassifier
from genEval.classifiers.digits import (
    Objective,
    check_digits_settings,
    cross_entropy,
    declare_digits_model,
    trained_digits_model,
)
from genEval.declared import declared_by

RECIPES = ("erm", "gaussian_noise", "pgd", "augmix", "augmix_noise")
_RECIPE_VERSION = "v1"  # bump when a recipe's code changes, so old caches are not reused


@dataclass(frozen=True)
class RecipeSettings:
    """Every setting of the recipes (each recipe reads its own; all are part of the cache key)."""

    noise_stds: tuple[float, ...] = (0.08, 0.12, 0.18, 0.26, 0.38)
    clean_share: float = 0.5
    eps: float = 0.1
    step_size: float = 0.025
    steps: int = 7
    augmix_severity: int = 3
    augmix_width: int = 3
    augmix_depth: int = -1
    augmix_alpha: float = 1.0
    augmix_group: int = 8
    jsd_weight: float = 12.0

    def used_by(self, recipe: str) -> dict:
        """The settings ``recipe`` reads (what keys its cache file and its record)."""
        keys = {
            "erm": (),
            "gaussian_noise": ("noise_stds", "clean_share"),
            "pgd": ("eps", "step_size", "steps"),
            "augmix": ("augmix_severity", "augmix_width", "augmix_depth", "augmix_alpha", "augmix_group", "jsd_weight"),
        }
        keys["augmix_noise"] = keys["augmix"] + ("noise_stds",)
        d = asdict(self)
        return {k: list(d[k]) if isinstance(d[k], tuple) else d[k] for k in keys[recipe]}

    def check(self) -> None:
        if not self.noise_stds or any(float(s) <= 0 for s in self.noise_stds):
            raise ValueError(f"noise_stds must be positive standard deviations, got {list(self.noise_stds)}.")
        if not 0.0 <= self.clean_share < 1.0:
            raise ValueError(f"clean_share must lie in [0, 1), got {self.clean_share}.")
        if self.eps <= 0 or self.step_size <= 0 or self.steps < 1:
            raise ValueError(
                f"pgd needs eps > 0, step_size > 0 and steps >= 1, got eps={self.eps}, step_size={self.step_size}, "
                f"steps={self.steps}."
            )
        if self.augmix_group < 1 or self.jsd_weight < 0:
            raise ValueError(
                f"augmix needs augmix_group >= 1 and jsd_weight >= 0, got {self.augmix_group} and {self.jsd_weight}."
            )


# ------------------------------------------------------------------------------------------ the objectives
def add_gaussian_noise(x: Tensor, stds: Sequence[float], gen: torch.Generator) -> Tensor:
    """``x + sigma * N(0, 1)`` clipped to ``[0, 1]``, ``sigma`` drawn per image from ``stds``."""
    sigma = torch.tensor([float(s) for s in stds])[torch.randint(len(stds), (len(x),), generator=gen)]
    return (x + sigma.view(-1, 1, 1, 1) * torch.randn(x.shape, generator=gen)).clamp(0.0, 1.0)


def gaussian_noise_objective(s: RecipeSettings) -> Objective:
    """Rusak et al. 2020: cross-entropy on a batch whose non-clean share carries Gaussian noise."""

    def loss(clf: ImageClassifier, x: Tensor, y: Tensor, gen: torch.Generator) -> Tensor:
        noisy = torch.rand(len(x), generator=gen) >= s.clean_share
        xb = torch.where(noisy.view(-1, 1, 1, 1), add_gaussian_noise(x, s.noise_stds, gen), x)
        return cross_entropy(clf, xb, y, gen)

    return loss


def pgd_attack(
    clf: ImageClassifier, x: Tensor, y: Tensor, eps: float, step_size: float, steps: int, gen: torch.Generator
) -> Tensor:
    """The L-inf PGD adversary of ``x`` (Madry et al. 2018): a uniform start in the ``eps`` ball, then ``steps``
    signed-gradient ascent steps on the cross-entropy, each projected onto the ball and onto ``[0, 1]``."""
    x_adv = (x + (2 * torch.rand(x.shape, generator=gen) - 1) * eps).clamp(0.0, 1.0)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        (grad,) = torch.autograd.grad(F.cross_entropy(clf.model(clf.preprocess(x_adv)), y), x_adv)
        x_adv = torch.minimum(torch.maximum(x_adv.detach() + step_size * grad.sign(), x - eps), x + eps).clamp(0.0, 1.0)
    return x_adv.detach()


def pgd_objective(s: RecipeSettings) -> Objective:
    """Madry et al. 2018: the cross-entropy of the batch's PGD adversaries."""

    def loss(clf: ImageClassifier, x: Tensor, y: Tensor, gen: torch.Generator) -> Tensor:
        return cross_entropy(clf, pgd_attack(clf, x, y, s.eps, s.step_size, s.steps, gen), y, gen)

    return loss


def augmix_views(x: Tensor, s: RecipeSettings) -> Tensor:
    """One AugMix view of ``x`` (B, C, H, W) in ``[0, 1]``: torchvision's AugMix on uint8 images, its chain's
    operations drawn per group of ``s.augmix_group`` images (the global RNG, forked and seeded by the trainer)."""
    from torchvision.transforms import AugMix

    mix = AugMix(
        severity=s.augmix_severity,
        mixture_width=s.augmix_width,
        chain_depth=s.augmix_depth,
        alpha=s.augmix_alpha,
        all_ops=False,
    )
    u8 = (x * 255).round().to(torch.uint8)
    out = torch.cat([mix(u8[i : i + s.augmix_group]) for i in range(0, len(u8), s.augmix_group)])
    return out.float() / 255.0


def jensen_shannon(logits: Sequence[Tensor]) -> Tensor:
    """Jensen-Shannon divergence among the softmax distributions of ``logits`` (AugMix's consistency loss):
    the mean KL divergence of each distribution from their mixture."""
    probs = [F.softmax(z, dim=1) for z in logits]
    mixture = torch.clamp(torch.stack(probs).mean(0), 1e-7, 1.0).log()
    return sum(F.kl_div(mixture, p, reduction="batchmean") for p in probs) / len(probs)


def augmix_objective(s: RecipeSettings, noise: bool = False) -> Objective:
    """Hendrycks et al. 2020: cross-entropy of the clean batch + ``jsd_weight`` x the Jensen-Shannon consistency
    between the clean batch and two AugMix views (with ``noise``: Gaussian noise on the views too)."""

    def loss(clf: ImageClassifier, x: Tensor, y: Tensor, gen: torch.Generator) -> Tensor:
        views = [augmix_views(x, s) for _ in range(2)]
        if noise:
            views = [add_gaussian_noise(v, s.noise_stds, gen) for v in views]
        logits = clf.model(clf.preprocess(torch.cat([x, *views])))
        clean, a1, a2 = logits.split(len(x))
        return F.cross_entropy(clean, y) + s.jsd_weight * jensen_shannon([clean, a1, a2])

    return loss


def objective_for(recipe: str, s: RecipeSettings) -> Objective | None:
    """The training objective of ``recipe`` (None: the plain cross-entropy of the digits trainer)."""
    if recipe == "erm":
        return None
    if recipe == "gaussian_noise":
        return gaussian_noise_objective(s)
    if recipe == "pgd":
        return pgd_objective(s)
    if recipe == "augmix":
        return augmix_objective(s)
    if recipe == "augmix_noise":
        return augmix_objective(s, noise=True)
    raise ValueError(f"unknown intervention recipe {recipe!r}; choose one of {', '.join(RECIPES)}.")


# ------------------------------------------------------------------------------------------ the factory
@declared_by(declare_digits_model)
def digits_intervention(
    recipe: str = "erm",
    arch: str = "cnn",
    seed: int = 0,
    epochs: int | None = None,
    image_size: int = 16,
    train_fraction: float = 1.0,
    noise_stds: Sequence[float] = RecipeSettings.noise_stds,
    clean_share: float = RecipeSettings.clean_share,
    eps: float = RecipeSettings.eps,
    step_size: float = RecipeSettings.step_size,
    steps: int = RecipeSettings.steps,
    augmix_severity: int = RecipeSettings.augmix_severity,
    augmix_width: int = RecipeSettings.augmix_width,
    augmix_depth: int = RecipeSettings.augmix_depth,
    augmix_alpha: float = RecipeSettings.augmix_alpha,
    augmix_group: int = RecipeSettings.augmix_group,
    jsd_weight: float = RecipeSettings.jsd_weight,
) -> ImageClassifier:
    """A digits classifier trained with the robustness intervention ``recipe`` (see the module docstring), on
    ``train_fraction`` of the digits train split, trained on first use and cached.

    ``recipe="erm"`` with the default settings is exactly :func:`genEval.classifiers.digits_classifier` (the
    same training run), cached apart. The model's name (results, logs) is ``digits_<recipe>_<arch>:seed<seed>``
    (with ``:frac<f>`` for a part of the train split).
    """
    if recipe not in RECIPES:
        raise ValueError(f"unknown intervention recipe {recipe!r}; choose one of {', '.join(RECIPES)}.")
    arch, epochs, image_size = check_digits_settings(arch, epochs, image_size)
    s = RecipeSettings(
        noise_stds=tuple(float(v) for v in noise_stds),
        clean_share=float(clean_share),
        eps=float(eps),
        step_size=float(step_size),
        steps=int(steps),
        augmix_severity=int(augmix_severity),
        augmix_width=int(augmix_width),
        augmix_depth=int(augmix_depth),
        augmix_alpha=float(augmix_alpha),
        augmix_group=int(augmix_group),
        jsd_weight=float(jsd_weight),
    )
    s.check()
    fraction = float(train_fraction)
    settings = {
        "arch": arch,
        "seed": int(seed),
        "epochs": epochs,
        "image_size": image_size,
        "recipe": recipe,
        "recipe_version": _RECIPE_VERSION,
        "train_fraction": fraction,
        **s.used_by(recipe),
    }
    tag = "" if fraction == 1.0 else f":frac{fraction:g}"
    stem = f"{recipe}-{arch}-seed{seed}-ep{epochs}-px{image_size}" + (f"-frac{fraction:g}" if tag else "")
    return trained_digits_model(
        settings,
        f"digits_{recipe}_{arch}:seed{seed}{tag}",
        cache_dir("digits_interventions"),
        stem,
        objective_for(recipe, s),
        fraction,
    )
