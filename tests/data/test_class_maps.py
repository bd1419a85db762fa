"""Issue 43: the CIFAR-10 <-> ImageNet-1k class map, read both ways, on the shared classes only."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch import nn

from genEval.classifiers.superclass import class_subset, superclass_classifier
from genEval.data.class_maps import CIFAR10, CIFAR10_IMAGENET, SHARED_CIFAR10
from genEval.data.folders import ImageFolderData, ImageNetData
from genEval.data.imagenet import imagenet_lemmas, imagenet_wnids, superclass_members, superclass_table

#: Geirhos et al. 2019's published 1k index lists (bethgelab/model-vs-human, human_categories.py) for the categories
#: that are CIFAR-10 classes: the map, stored as WordNet ids, must resolve to exactly these through timm's 1k order.
GEIRHOS = {
    "airplane": [404],
    "automobile": [436, 511, 817],
    "ship": [472, 554, 625, 814, 914],
    "truck": [555, 569, 656, 675, 717, 734, 864, 867],
    "cat": [281, 282, 283, 284, 285, 286],
}


def test_the_map_is_imagenet_1k_and_resolves_to_the_published_indices():
    index = {w: i for i, w in enumerate(imagenet_wnids())}
    assert all(w in index for ws in CIFAR10_IMAGENET.values() for w in ws)
    assert max(Counter(w for ws in CIFAR10_IMAGENET.values() for w in ws).values()) == 1  # no class in two
    table = superclass_table("cifar10")
    assert list(table) == list(SHARED_CIFAR10) == [c for c in CIFAR10 if c != "deer"]
    members = dict(zip(table, superclass_members(table)))
    for name, indices in GEIRHOS.items():
        assert members[name] == indices
    assert len(members["bird"]) == 49 and len(members["dog"]) == 109 and 207 in members["dog"]  # golden retriever
    assert members["frog"] == [30, 31, 32] and members["horse"] == [339]  # CINIC-10's 1k members
    lemmas = imagenet_lemmas()
    assert lemmas[members["horse"][0]][0] == "sorrel" and lemmas[members["frog"][1]][0] == "tree frog"


class FixedLogits(nn.Module):
    def __init__(self, logits: torch.Tensor, class_names=None):
        super().__init__()
        self.register_buffer("table", logits)
        self.num_classes = logits.shape[1]
        self.class_names = class_names
        self.name = "fixed"

    def forward(self, images):
        return self.table[: images.shape[0]]


def test_an_imagenet_classifier_reads_cifar_classes_by_its_largest_mapped_logit():
    logits = torch.zeros(3, 1000)
    logits[0, 817] = 5.0  # sports car -> automobile
    logits[1, 339] = 5.0  # sorrel -> horse
    logits[2, 0] = 9.0  # tench, in no CIFAR class: ignored ...
    logits[2, 31] = 1.0  # ... so the tree frog wins: frog
    clf = superclass_classifier(FixedLogits(logits), "cifar10", pool="max")
    out = clf(torch.rand(3, 3, 8, 8))
    assert out.shape == (3, 9) and clf.class_names == list(SHARED_CIFAR10)
    assert [clf.class_names[i] for i in out.argmax(1)] == ["automobile", "horse", "frog"]


def test_a_cifar_classifier_is_restricted_to_the_shared_classes():
    logits = torch.tensor([[0.0, 1.0, 0.0, 0.0, 9.0, 2.0, 0.0, 0.0, 0.0, 0.0]])  # deer highest, then dog
    clf = class_subset(FixedLogits(logits, list(CIFAR10)))
    out = clf(torch.rand(1, 3, 8, 8))
    assert out.shape == (1, 9) and clf.class_names[int(out.argmax(1))] == "dog"
    torch.testing.assert_close(out[0], logits[0, [0, 1, 2, 3, 5, 6, 7, 8, 9]])
    with pytest.raises(ValueError, match=r"classes \['zebra'\] are not classes of the classifier"):
        class_subset(FixedLogits(logits, list(CIFAR10)), ["zebra"])
    with pytest.raises(ValueError, match=r"needs a classifier that names its classes"):
        class_subset(FixedLogits(logits))


def _folders(root: Path, names) -> Path:
    for i, n in enumerate(names):
        (root / n).mkdir(parents=True)
        Image.new("RGB", (8, 8), (30 * i, 90, 180)).save(root / n / f"{i}.png")
    return root


def test_image_folders_keep_the_shared_classes_and_imagenet_folders_get_cifar_labels(tmp_path):
    root = _folders(tmp_path / "cifar", ["cat", "deer", "dog"])
    shared = ImageFolderData(root, class_names=["cat", "dog"], other_folders="skip")
    assert shared.class_names == ["cat", "dog"] and sorted(shared.labels) == [0, 1] and len(shared) == 2
    with pytest.raises(ValueError, match=r"deer"):
        ImageFolderData(root, class_names=["cat", "dog"])  # refused by default, naming the folder
    with pytest.raises(ValueError, match=r"other_folders"):
        ImageFolderData(root, class_names=["cat", "dog"], other_folders="drop")
    wnids = _folders(tmp_path / "val", ["n01440764", "n01641577", "n02099601"])  # tench, bullfrog, golden retriever
    ds = ImageNetData(wnids, superclasses="cifar10", class_names=None, image_size=8, subset="first")
    assert ds.class_names == list(SHARED_CIFAR10) and sorted(ds.labels) == [4, 5]  # dog, frog; the tench is left out
