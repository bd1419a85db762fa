"""Any strong classifier used as the oracle ``O`` (paper Sec. 3.2: "a foundation model, or any strong
classifier, vetoes steps that change what the image depicts"; docs/method.md, "The actors").

The oracle accepts an image when its own prediction equals the reference class and, optionally, its
softmax probability for that class reaches an acceptance threshold (docs/method.md, "Choices the
paper leaves open"). The reference (``reference``, read by the driver) is the true label (``label``,
docs/method.md "One sample", step 3) or the oracle's own verdict on the clean image (``clean_prediction``: the
reading under which the paper's "VR = 100 in our official configuration", Appendix J, is possible with an
imperfect oracle).

A classifier knows the classes it was trained on (``class_names`` of a CIFAR ResNet or a digits model):
``prepare`` refuses a data set with other classes before the first batch, and names the oracle preset that
fits the data. The small helpers here (threshold, reference and label checks, turning logits into a
:class:`~genEval.interfaces.Judgement`) are shared by the other oracles in this package.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from genEval.data.standard import CIFAR10_CLASSES, DIGIT_CLASSES
from genEval.interfaces import Judgement, SettingError, check_images, values_checked

log = logging.getLogger(__name__)

#: What the oracle must keep seeing: the true label, or its own verdict on the clean image.
REFERENCES = ("label", "clean_prediction")
#: Oracle presets (conf/oracle) whose judges were trained on exactly these classes.
ORACLE_PRESETS = {tuple(CIFAR10_CLASSES): "cifar_resnet_zoo", tuple(DIGIT_CLASSES): "digits_zoo"}


def check_reference(reference: str, who: str) -> str:
    """Validate ``oracle.reference``: ``label`` (default) or ``clean_prediction``."""
    if reference not in REFERENCES:
        raise SettingError(
            "reference",
            reference,
            "label (the oracle must keep seeing the true class) or clean_prediction (its own verdict on the "
            "clean image)",
            "label",
            who,
        )
    return reference


def _short(names) -> str:
    names = [str(n) for n in names]
    return "[" + ", ".join(names[:10]) + (f", ... ({len(names)} classes)" if len(names) > 10 else "") + "]"


def check_trained_classes(who: str, trained: list[str] | None, class_names: list[str]) -> None:
    """Refuse data whose classes differ from the ones the judge was trained on (when it knows them)."""
    if trained is None or list(trained) == list(class_names):
        return
    preset = ORACLE_PRESETS.get(tuple(class_names))
    fix = (
        f"Use oracle={preset}, whose judges were trained on these classes"
        if preset
        else "Use an oracle trained on these classes, or oracle=clip (zero-shot: it reads any class names)"
    )
    raise ValueError(
        f"oracle {who} was trained on the classes {_short(trained)} but the data's classes are "
        f"{_short(class_names)}; it would judge images of classes it does not know. {fix} (an explicit "
        "oracle=... on the command line replaces the data preset's default)."
    )


def check_threshold(threshold: float | None, who: str) -> float | None:
    """Validate an acceptance threshold: ``None`` (off) or a probability in ``[0, 1]``."""
    if threshold is None:
        return None
    expected = "a number in [0, 1] (compared with the oracle's probability for the true label) or null (off)"
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise SettingError("threshold", threshold, expected, "0.5", who)
    return float(threshold)


def check_labels(labels: Tensor, batch: int, num_classes: int | None, where: str) -> Tensor:
    """Return ``labels`` as a (B,) long tensor, raising a teaching error on bad shape or range."""
    if not isinstance(labels, Tensor):
        labels = torch.as_tensor(labels)
    if labels.ndim != 1 or labels.shape[0] != batch:
        raise ValueError(f"{where}: expected labels shaped ({batch},) to match the images, got {tuple(labels.shape)}.")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(
            f"{where}: labels must be integer class indices, got dtype {labels.dtype}. Convert with labels.long()."
        )
    labels = labels.long()
    if batch and num_classes is not None and values_checked():
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= num_classes:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"{where}: label {bad} is outside the {num_classes} classes "
                f"(valid labels are 0..{num_classes - 1}). Check that the oracle was prepared "
                "with the dataset's class_names."
            )
    return labels


def judgement_from_logits(logits: Tensor, labels: Tensor, threshold: float | None) -> Judgement:
    """Softmax ``logits`` (B, C): accept where argmax == label (and p(label) >= threshold when set)."""
    probs = logits.float().softmax(dim=-1)
    labels = labels.to(probs.device)
    scores = probs.gather(1, labels[:, None]).squeeze(1)
    predictions = probs.argmax(dim=-1)
    accept = predictions == labels
    if threshold is not None:
        accept = accept & (scores >= threshold)
    return Judgement(accept=accept, scores=scores, predictions=predictions)


class ClassifierOracle(nn.Module):
    """Use any classifier (``[0, 1]`` images -> ``(B, num_classes)`` logits) as a judge.

    Args:
        classifier: an ``nn.Module`` obeying genEval's classifier contract, with ``num_classes``.
            It owns its resize and normalisation. It is put in eval mode here; its parameters are
            left as they are (the same module may also be the tested classifier).
        threshold: when set, an image is accepted only if the classifier's softmax probability for
            the true label is at least this value (in ``[0, 1]``); ``None`` accepts on argmax alone.
        name: stable id recorded in results; default ``"classifier:<name or class name>"``.
        reference: ``label`` or ``clean_prediction`` (see the module docstring).
    """

    def __init__(
        self, classifier: nn.Module, threshold: float | None = None, name: str | None = None, reference: str = "label"
    ) -> None:
        super().__init__()
        if not isinstance(classifier, nn.Module):
            raise TypeError(
                f"ClassifierOracle needs an nn.Module classifier, got "
                f"{type(classifier).__name__}. Wrap your model in an nn.Module that maps "
                "[0, 1] images to logits."
            )
        num_classes = getattr(classifier, "num_classes", None)
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
            raise ValueError(
                f"ClassifierOracle: the classifier {type(classifier).__name__} has no positive "
                f"integer `num_classes` attribute (got {num_classes!r}). Set "
                "classifier.num_classes to the number of logits it returns."
            )
        self.classifier = classifier.eval()
        self.num_classes = num_classes
        self.threshold = check_threshold(threshold, "ClassifierOracle")
        self.reference = check_reference(reference, "ClassifierOracle")
        inner = getattr(classifier, "name", None)
        self.name = name or f"classifier:{inner if isinstance(inner, str) else type(classifier).__name__}"
        self.class_names: list[str] | None = None

    def prepare(self, class_names: list[str]) -> None:
        """Check that the classifier has one logit per class of the dataset, and, when it knows the classes
        it was trained on (``classifier.class_names``), that they are the dataset's."""
        check_trained_classes(self.name, getattr(self.classifier, "class_names", None), list(class_names))
        n = len(class_names)
        if n != self.num_classes:
            raise ValueError(
                f"oracle {self.name} has {self.num_classes} classes but the dataset has {n} "
                f"({', '.join(map(str, list(class_names)[:5]))}{', ...' if n > 5 else ''}). Use an oracle "
                "classifier trained on the dataset's classes, or set data.class_names to match."
            )
        self.class_names = list(class_names)

    @torch.no_grad()
    def judge(self, images: Tensor, labels: Tensor) -> Judgement:
        """Judge ``images`` (B, C, H, W) in [0, 1] against ``labels`` (B,) long."""
        check_images(images, f"oracle {self.name}")
        labels = check_labels(labels, images.shape[0], self.num_classes, f"oracle {self.name}")
        logits = self.classifier(images)
        if logits.ndim != 2 or logits.shape != (images.shape[0], self.num_classes):
            raise ValueError(
                f"oracle {self.name}: the classifier returned logits shaped "
                f"{tuple(logits.shape)}, expected ({images.shape[0]}, {self.num_classes}). "
                "Check classifier.num_classes."
            )
        return judgement_from_logits(logits, labels, self.threshold)

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, num_classes={self.num_classes}, threshold={self.threshold}, "
            f"reference={self.reference!r}"
        )
