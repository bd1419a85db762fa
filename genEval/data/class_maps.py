"""CIFAR-10 <-> ImageNet-1k: which ImageNet-1k classes are each CIFAR-10 class (Shi et al. 2023, section 5.1: "map a
subset of ImageNet classes to CIFAR-10 classes", after Miller et al. 2021; docs/comparing.md, "Across data sets").

Miller et al. built their map by hand from the WordNet hierarchy and never published it. This map is taken from two
published ones, as they are, and stored as WordNet ids (the 1k order, indices and names come from timm's ImageNet
metadata, :mod:`genEval.data.imagenet`):

* airplane, automobile, bird, cat, dog, ship, truck: the 16-class-ImageNet of Geirhos et al., "ImageNet-trained CNNs
  are biased towards texture" (ICLR 2019), whose entry-level categories airplane, car, bird, cat, dog, boat and
  truck are these CIFAR-10 classes; their 1k members are the ``*_indices`` lists of bethgelab/model-vs-human,
  ``modelvshuman/helper/human_categories.py`` (WordNet hyponyms, with the ambiguous classes removed by hand there).
* frog and horse, which the 16 categories lack: the ImageNet-1k classes in CINIC-10's map of ImageNet synsets to
  the CIFAR-10 classes (Darlow et al., "CINIC-10 is not ImageNet or CIFAR-10", 2018; BayesWatch/cinic-10,
  ``synsets-to-cifar-10-classes.txt``): bullfrog, tree frog, tailed frog; sorrel.
* deer: ImageNet-1k has no deer class (CINIC-10 took its deer images from ImageNet-21k; its "deer" tree, rooted at
  "ruminant", reaches only bison among the 1k classes), so deer is not a shared class.

Accuracies across the two label spaces are therefore over the **9 shared classes** only (S0's "class
subsampling": keep the classes present in every test set): :data:`SHARED_CIFAR10` in CIFAR-10's label order. An
ImageNet classifier reads CIFAR-10-style classes through ``genEval.classifiers.superclass_classifier`` with
``superclasses: cifar10`` (``pool: max`` picks the CIFAR class of the largest mapped ImageNet logit, Miller et al.'s
rule); ImageNet images get CIFAR-10 labels with ``genEval.data.ImageNetData(superclasses="cifar10")``; a CIFAR-10
classifier is restricted to the shared classes with ``genEval.classifiers.class_subset``.
"""

from __future__ import annotations

#: CIFAR-10 class -> the WordNet ids of its ImageNet-1k classes (sources in the module docstring), in 1k order.
CIFAR10_IMAGENET: dict[str, tuple[str, ...]] = {
    "airplane": ("n02690373",),
    "automobile": ("n02814533", "n03100240", "n04285008"),
    "bird": (
        "n01514859", "n01530575", "n01531178", "n01532829", "n01534433", "n01537544", "n01558993", "n01560419",
        "n01582220", "n01592084", "n01601694", "n01614925", "n01616318", "n01622779", "n01795545", "n01796340",
        "n01797886", "n01798484", "n01817953", "n01818515", "n01819313", "n01820546", "n01824575", "n01828970",
        "n01829413", "n01833805", "n01843065", "n01843383", "n01855032", "n01855672", "n01860187", "n02002556",
        "n02002724", "n02006656", "n02007558", "n02009229", "n02009912", "n02011460", "n02013706", "n02017213",
        "n02018207", "n02018795", "n02025239", "n02027492", "n02028035", "n02033041", "n02037110", "n02051845",
        "n02056570",
    ),
    "cat": ("n02123045", "n02123159", "n02123394", "n02123597", "n02124075", "n02125311"),
    "dog": (
        "n02085782", "n02085936", "n02086079", "n02086240", "n02086646", "n02086910", "n02087046", "n02087394",
        "n02088094", "n02088238", "n02088364", "n02088466", "n02088632", "n02089078", "n02089867", "n02089973",
        "n02090379", "n02090622", "n02090721", "n02091032", "n02091134", "n02091244", "n02091467", "n02091635",
        "n02091831", "n02092002", "n02092339", "n02093256", "n02093428", "n02093647", "n02093754", "n02093859",
        "n02093991", "n02094114", "n02094258", "n02094433", "n02095314", "n02095570", "n02095889", "n02096051",
        "n02096294", "n02096437", "n02096585", "n02097047", "n02097130", "n02097209", "n02097298", "n02097474",
        "n02097658", "n02098105", "n02098286", "n02099267", "n02099429", "n02099601", "n02099712", "n02099849",
        "n02100236", "n02100583", "n02100735", "n02100877", "n02101006", "n02101388", "n02101556", "n02102040",
        "n02102177", "n02102318", "n02102480", "n02102973", "n02104029", "n02104365", "n02105056", "n02105162",
        "n02105251", "n02105505", "n02105641", "n02105855", "n02106030", "n02106166", "n02106382", "n02106550",
        "n02106662", "n02107142", "n02107312", "n02107574", "n02107683", "n02107908", "n02108000", "n02108422",
        "n02108551", "n02108915", "n02109047", "n02109525", "n02109961", "n02110063", "n02110185", "n02110627",
        "n02110806", "n02110958", "n02111129", "n02111277", "n02111500", "n02112018", "n02112350", "n02112706",
        "n02113023", "n02113624", "n02113712", "n02113799", "n02113978",
    ),
    "frog": ("n01641577", "n01644373", "n01644900"),
    "horse": ("n02389026",),
    "ship": ("n02951358", "n03344393", "n03662601", "n04273569", "n04612504"),
    "truck": (
        "n03345487", "n03417042", "n03770679", "n03796401", "n03930630", "n03977966", "n04461696", "n04467665",
    ),
}  # fmt: skip
#: Where each class's members come from (cited in the module docstring).
SOURCES = {
    **{c: "Geirhos et al. 2019, 16-class-ImageNet" for c in ("airplane", "automobile", "bird", "cat", "dog")},
    "ship": "Geirhos et al. 2019, 16-class-ImageNet (boat)",
    "truck": "Geirhos et al. 2019, 16-class-ImageNet",
    "frog": "CINIC-10 (Darlow et al. 2018)",
    "horse": "CINIC-10 (Darlow et al. 2018)",
}
CIFAR10 = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
#: The CIFAR-10 classes ImageNet-1k also has, in CIFAR-10's label order (deer has no ImageNet-1k class).
SHARED_CIFAR10 = tuple(c for c in CIFAR10 if c in CIFAR10_IMAGENET)
