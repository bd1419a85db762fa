"""Every ``conf/**.yaml`` composes and instantiates (issue 13: configs mirror code).

The options of the plug-in groups (generator, oracle, classifier) are built and checked by the conformance suite,
``tests/contracts``. The other groups' options whose real data cannot exist offline are instantiated with small
stand-ins that the test writes itself (idx files, a fake CIFAR-10 batch, image folders, a style mask); everything
else is built as configured. A new option in a group must be listed in ``FIXTURES`` (with no overrides when it
needs none), so an option that does not instantiate cannot slip in unnoticed.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from genEval.commands import CONF_DIR, build, config_options
from genEval.interfaces import ImageDataset
from genEval.search.perturb import SearchConfig
from tests.support.assets import ASSETS


# ------------------------------------------------------------------------------- stand-ins written by the test
def _mnist(root: Path) -> Path:
    def idx(path: Path, magic: int, arr: np.ndarray) -> None:
        header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
        path.write_bytes(header + arr.astype(np.uint8).tobytes())

    rng = np.random.default_rng(0)
    idx(root / "t10k-images-idx3-ubyte", 2051, rng.integers(0, 256, (20, 28, 28)))
    idx(root / "t10k-labels-idx1-ubyte", 2049, np.arange(20) % 10)
    return root


def _cifar10(root: Path) -> Path:
    """torchvision's CIFAR-10 layout (``cifar-10-batches-py/test_batch``, ``batches.meta``)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    with open(folder / "test_batch", "wb") as fh:
        pickle.dump({"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), "labels": list(range(10)) * 2}, fh)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": ["c"] * 10}, fh)
    return root


def _image_folder(root: Path) -> Path:
    from PIL import Image

    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (16, 16), (40 * i, 100, 200)).save(root / c / f"{i}.png")
    return root


def _wnid_folder(root: Path, wnids: tuple[str, ...] = ("n01440764", "n01443537", "n02085620")) -> Path:
    """An ImageNet validation-layout folder: tench (1k class 0), goldfish (1) and Chihuahua (151, a dog) by default."""
    from PIL import Image

    for i, wnid in enumerate(wnids):
        (root / wnid).mkdir(parents=True)
        Image.new("RGB", (20 + 4 * i, 16), (60 * i, 90, 180)).save(root / wnid / f"ILSVRC2012_val_{i:08d}.JPEG")
    return root


def _style_mask(root: Path) -> Path:
    from genEval.style_mask import fit_style_mask

    g = torch.Generator().manual_seed(0)
    start = torch.randn(40, 2, 2, 2, generator=g)
    final = start.clone()
    final[:, 0, 0, 0] += 3.0
    mask = fit_style_mask(start, final, generator="sigmoid", dataset="toy")
    return mask.save(root / "mask.safetensors")


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("stand-ins")
    paths = {}
    for sub in ("mnist", "cifar"):
        (root / sub).mkdir()
    paths["mnist"] = _mnist(root / "mnist")
    paths["cifar10"] = _cifar10(root / "cifar")
    paths["folder"] = _image_folder(root / "folder")
    paths["wnids"] = _wnid_folder(root / "wnids")
    paths["wnids_cifar"] = _wnid_folder(root / "wnids_cifar", ("n01641577", "n02085782"))  # a frog and a dog
    paths["mask"] = _style_mask(root)
    return {k: str(v) for k, v in paths.items()}


# Overrides per option, in the option's own keys; values are templates filled from `stand_ins`.
FIXTURES: dict[str, dict[str, dict[str, str]]] = {
    "data": {
        "cifar10": {"root": "{cifar10}"},
        "cifar10_jpg": {"limit": "20"},
        "digits": {},
        "digits_train": {},
        "imagefolder": {"root": "{folder}"},
        "mnist": {"root": "{mnist}"},
        "imagenet": {"root": "{wnids}"},
        "imagenet9": {"root": "{wnids}"},
        "imagenet_cifar10": {"root": "{wnids_cifar}"},
        "digits_noisy": {},
    },
    "mask": {"none": {}, "auto": {}, "sparse": {"path": "{mask}"}},
    "search": {"default": {}},
    "tracking": {"mlflow": {}},  # built, not connected: nothing is written
    "protocol": {"imagenet_a_200": {}},  # the snapshot commands' logit protocols (conf/filter.yaml, transfer.yaml)
}
#: The command config a group's options are composed in (default: the main job's, conf/config.yaml).
COMPOSED_IN = {"protocol": "filter"}
NEEDS_ASSETS = {("data", "cifar10_jpg")}
CASES = [(g, n) for g in FIXTURES for n in config_options(g)]


def test_every_option_has_a_fixture_entry():
    for group in FIXTURES:
        assert set(config_options(group)) == set(FIXTURES[group]), f"conf/{group}: list new options in FIXTURES"


def _compose(config: str, overrides: list[str]):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config, overrides=overrides)


def _build_role(group: str, node):
    if group == "search":
        return SearchConfig.coerce(OmegaConf.to_container(node, resolve=True))
    return build(node, group)


@pytest.mark.parametrize("group,name", CASES)
def test_every_option_composes_and_instantiates(group, name, stand_ins, monkeypatch):
    if (group, name) in NEEDS_ASSETS and not ASSETS.exists():
        pytest.skip(f"conf/{group}/{name}.yaml reads ../shared/assets, which is absent")
    if (group, name) == ("data", "cifar10"):  # the fake batch cannot match torchvision's md5 of the real one
        import torchvision

        monkeypatch.setattr(torchvision.datasets.CIFAR10, "_check_integrity", lambda self: True)
        monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    overrides = [f"{group}={name}"] + [f"{group}.{k}={v.format(**stand_ins)}" for k, v in FIXTURES[group][name].items()]
    cfg = _compose(COMPOSED_IN.get(group, "config"), overrides)
    obj = _build_role(group, cfg[group])
    if group == "data":
        assert isinstance(obj, ImageDataset), f"{group}={name} built {type(obj).__name__}"
    if group == "protocol":
        assert callable(obj.wrap) and len(obj.indices) == 200, f"{group}={name} built {obj!r}"


def test_experiment_presets_compose_and_instantiate_every_role():
    if not ASSETS.exists():
        pytest.skip("the experiment presets read ../shared/assets, which is absent")
    for name in config_options("experiment"):
        cfg = _compose("config", [f"experiment={name}"])
        for group in ("data", "classifier", "generator", "oracle", "mask", "search"):
            _build_role(group, cfg[group])


@pytest.mark.parametrize("config", sorted(p.stem for p in CONF_DIR.glob("*.yaml")))
def test_every_command_config_composes_and_its_role_nodes_instantiate(config):
    cfg = _compose(config, [])
    for group in ("data", "generator", "oracle", "mask", "search"):
        if group in cfg and cfg[group] is not None and (group == "search" or "_target_" in cfg[group]):
            if group == "data" and not ASSETS.exists() and "asset:" in str(OmegaConf.to_yaml(cfg[group])):
                continue
            _build_role(group, cfg[group])
