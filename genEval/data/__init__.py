"""Evaluation data sets (backends): the test images ``x`` and labels ``y`` the search starts from.

``base`` holds what every data set shares (options, ``indices``, the seeded class-balanced ``limit`` draw,
:class:`~genEval.data.base.SubsetData`); ``folders`` reads image folders and ImageNet wnid folders, ``standard``
the in-memory sets (CIFAR-10, MNIST, scikit-learn's digits), ``imagenet`` the ImageNet class metadata. The
names below are the spelling configs (``_target_: genEval.data.standard.DigitsData``) and notebooks use.
"""

from genEval.data.base import SUBSET_MODES, ImageData, SubsetData, check_unique_names, round_robin_order
from genEval.data.folders import IMAGE_EXTENSIONS, ImageFolderData, ImageNetData
from genEval.data.standard import CIFAR10_CLASSES, DIGIT_CLASSES, CIFAR10Data, DigitsData, MNISTData, read_mnist_file

__all__ = [
    "CIFAR10_CLASSES",
    "DIGIT_CLASSES",
    "IMAGE_EXTENSIONS",
    "SUBSET_MODES",
    "CIFAR10Data",
    "DigitsData",
    "ImageData",
    "ImageFolderData",
    "ImageNetData",
    "MNISTData",
    "SubsetData",
    "check_unique_names",
    "read_mnist_file",
    "round_robin_order",
]
