"""Datasets (genEval.data): the ImageDataset contract, round-robin limits, file parsing, error messages."""

from __future__ import annotations

import gzip
import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from PIL import Image

from genEval.data.base import _to_channels, round_robin_order
from genEval.data.folders import ImageFolderData
from genEval.data.standard import CIFAR10_CLASSES, CIFAR10Data, DigitsData, MNISTData, read_mnist_file
from genEval.interfaces import ImageDataset
from tests.support.assets import ASSETS, ROOT, asset

CONF = ROOT / "conf" / "data"


def _check_sample(ds, i: int = 0) -> tuple[torch.Tensor, int, str]:
    image, label, source_id = ds[i]
    assert isinstance(ds, ImageDataset)
    assert image.dtype == torch.float32 and image.ndim == 3
    assert 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    assert isinstance(label, int) and 0 <= label < len(ds.class_names)
    assert isinstance(source_id, str) and source_id
    return image, label, source_id


def _write_folder(root: Path, counts: dict[str, int], size: int = 6, mode: str = "RGB") -> Path:
    """Class folders of small PNGs; pixel value encodes (class index, image index) for identification."""
    for c, (cls, n) in enumerate(sorted(counts.items())):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for k in range(n):
            value = 20 * c + k
            color = value if mode == "L" else (value, 255 - value, 7)
            Image.new(mode, (size, size), color).save(root / cls / f"{k:03d}.png")
    return root


# ------------------------------------------------------------------------------------------ round robin
def test_round_robin_order_interleaves_and_skips_exhausted_classes():
    labels = [0, 0, 0, 1, 2, 2, 0, 1]
    order = round_robin_order(labels)
    assert [labels[i] for i in order] == [0, 1, 2, 0, 1, 2, 0, 0]
    assert order == [0, 3, 4, 1, 7, 5, 2, 6]  # within a class, dataset order
    assert sorted(order) == list(range(len(labels)))


def test_limit_is_balanced_deterministic_and_a_prefix(tmp_path):
    root = _write_folder(tmp_path / "imgs", {"a": 5, "b": 2, "c": 4})
    full = ImageFolderData(root)
    assert full.labels == [0] * 5 + [1] * 2 + [2] * 4  # no limit: natural order
    ids = {n: [ImageFolderData(root, limit=n, subset="first")[i][2] for i in range(min(n, 11))] for n in range(1, 13)}
    for n in range(1, 12):
        assert ids[n] == ids[n + 1][:n]  # limit=N is a prefix of limit=N+1
    assert ids[6] == ["a/000.png", "b/000.png", "c/000.png", "a/001.png", "b/001.png", "c/001.png"]
    assert [ImageFolderData(root, limit=6, subset="first")[i][2] for i in range(6)] == ids[6]  # same N, same samples
    assert len(ImageFolderData(root, limit=100)) == 11
    ds = ImageFolderData(root, limit=9)
    assert Counter(ds.labels) == {0: 4, 1: 2, 2: 3}  # b runs out after 2; the others keep alternating


def test_digits_limit_is_class_balanced():
    ds = DigitsData(limit=30)
    assert len(ds) == 30 and Counter(ds.labels) == {c: 3 for c in range(10)}
    assert sorted(ds[i][1] for i in range(10)) == list(range(10))  # the first round: every class once
    assert [DigitsData(limit=40)[i][2] for i in range(30)] == [ds[i][2] for i in range(30)]


# ----------------------------------------------------------------------------------------- image folder
def test_image_folder_labels_ids_and_range(tmp_path):
    root = _write_folder(tmp_path / "imgs", {"cat": 2, "dog": 3})
    (tmp_path / "imgs" / "dog" / "notes.txt").write_text("not an image, ignored by extension")
    ds = ImageFolderData(root)
    assert ds.class_names == ["cat", "dog"] and len(ds) == 5 and ds.name == "imagefolder:imgs"
    image, label, sid = _check_sample(ds, 2)
    assert image.shape == (3, 6, 6) and label == 1 and sid == "dog/000.png"
    assert torch.allclose(image[:, 0, 0], torch.tensor([20, 235, 7]) / 255.0)
    # an explicit class list fixes the label order and may hold classes without a folder
    ds2 = ImageFolderData(root, class_names=["dog", "bird", "cat"])
    assert ds2[0][1] == 2 and ds2[2][1] == 0 and ds2.class_names == ["dog", "bird", "cat"]
    assert "n=5" in repr(ds)


def test_grayscale_to_rgb_rgb_to_gray_and_resize(tmp_path):
    gray = _write_folder(tmp_path / "g", {"a": 1}, size=10, mode="L")
    x = ImageFolderData(gray, channels=3)[0][0]
    assert x.shape == (3, 10, 10) and torch.equal(x[0], x[1]) and torch.equal(x[1], x[2])
    assert ImageFolderData(gray, channels=None)[0][0].shape == (1, 10, 10)
    rgb = _write_folder(tmp_path / "c", {"a": 1}, size=10)
    g = ImageFolderData(rgb, channels=1)[0][0]
    expected = np.asarray(Image.open(rgb / "a" / "000.png").convert("L"), dtype=np.float32) / 255
    assert g.shape == (1, 10, 10) and np.allclose(g[0].numpy(), expected, atol=1 / 255 + 1e-6)
    small = ImageFolderData(rgb, image_size=4)[0][0]
    big = ImageFolderData(rgb, image_size=17)[0][0]
    assert small.shape == (3, 4, 4) and big.shape == (3, 17, 17)
    assert 0 <= float(big.min()) and float(big.max()) <= 1
    # a constant image stays constant under bilinear resizing
    assert torch.allclose(big, big[:, :1, :1].expand_as(big), atol=1e-6)


def test_rgb_tensor_to_gray_uses_the_luma_weights_of_pil():
    """Tensor sources (CIFAR-10 pickles, RGB MNIST copies) go grey with ITU-R 601 weights, as PIL's "L" does."""
    rgb = np.random.default_rng(0).integers(0, 256, size=(9, 7, 3), dtype=np.uint8)
    expected = np.asarray(Image.fromarray(rgb).convert("L"), dtype=np.float32) / 255
    g = _to_channels(torch.from_numpy(rgb).permute(2, 0, 1).float() / 255, 1)
    assert g.shape == (1, 9, 7) and np.allclose(g[0].numpy(), expected, atol=1 / 255 + 1e-6)
    assert not np.allclose(rgb.mean(2) / 255, expected, atol=1 / 255 + 1e-6)  # plain averaging would fail


def test_image_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"image folder root not found: '.*nowhere'.*data\.root"):
        ImageFolderData(tmp_path / "nowhere")
    (tmp_path / "empty" / "a").mkdir(parents=True)
    (tmp_path / "empty" / "a" / "x.txt").write_text("x")
    with pytest.raises(ValueError, match=r"no images with extensions .*empty"):
        ImageFolderData(tmp_path / "empty")
    root = _write_folder(tmp_path / "imgs", {"cat": 1, "zebra": 1})
    with pytest.raises(ValueError, match=r"folder class 'zebra' .* not in class_names \['cat', 'dog'\]"):
        ImageFolderData(root, class_names=["cat", "dog"])
    (root / "cat" / "broken.jpg").write_bytes(b"this is not a jpeg")
    ds = ImageFolderData(root)
    with pytest.raises(ValueError, match=r"cannot read image file '.*broken\.jpg'"):
        [ds[i] for i in range(len(ds))]
    with pytest.raises(ValueError, match=r"channels must be 1 .* got 2"):
        ImageFolderData(root, channels=2)
    with pytest.raises(ValueError, match=r"limit must be a whole number >= 1 .* got 0; e.g. limit=100"):
        ImageFolderData(root, limit=0)
    with pytest.raises(ValueError, match=r"image_size must be a whole number >= 1 .* got -3"):
        ImageFolderData(root, image_size=-3)
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]


def test_cifar10_jpg_assets_counts():
    root = asset("cifar10/test-jpg")
    ds = ImageFolderData(root, class_names=CIFAR10_CLASSES, name="cifar10_jpg:test-jpg")
    assert len(ds) == 10_000 and ds.class_names == sorted(CIFAR10_CLASSES)  # folder order == CIFAR order
    assert Counter(ds.labels) == {c: 1000 for c in range(10)}
    image, label, sid = _check_sample(ds, 0)
    assert image.shape == (3, 32, 32) and label == 0 and sid == "airplane/0000.jpg"
    assert Counter(ImageFolderData(root, limit=50).labels) == {c: 5 for c in range(10)}


# ------------------------------------------------------------------------------------------------ CIFAR
def test_cifar10_missing_files_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"CIFAR-10 \(test\) not found .*download=true.*cifar10_jpg"):
        CIFAR10Data(root=tmp_path, download=False)


# ------------------------------------------------------------------------------------------------ MNIST
def _idx_bytes(array: np.ndarray, magic: int) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_mnist(folder: Path, prefix: str, images: np.ndarray, labels: np.ndarray, gz: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for stem, data, magic in (
        (f"{prefix}-images-idx3-ubyte", images, 2051),
        (f"{prefix}-labels-idx1-ubyte", labels, 2049),
    ):
        raw = _idx_bytes(data, magic)
        if gz:
            with gzip.open(folder / f"{stem}.gz", "wb") as f:
                f.write(raw)
        else:
            (folder / stem).write_bytes(raw)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_parsing(tmp_path, gz):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(12, 5, 4), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], dtype=np.uint8)
    _write_mnist(tmp_path, "t10k", images, labels, gz)
    raw = read_mnist_file(tmp_path / ("t10k-images-idx3-ubyte" + (".gz" if gz else "")), "images")
    assert raw.dtype == torch.uint8 and np.array_equal(raw.numpy(), images)
    lab = read_mnist_file(tmp_path / ("t10k-labels-idx1-ubyte" + (".gz" if gz else "")), "labels")
    assert lab.tolist() == labels.tolist()
    ds = MNISTData(tmp_path, split="test")
    assert len(ds) == 12 and ds.name == "mnist:test" and ds.labels == labels.tolist()
    image, label, sid = _check_sample(ds, 5)
    assert image.shape == (1, 5, 4) and label == 9 and sid == "test/00005"
    assert torch.allclose(image[0], torch.from_numpy(images[5]).float() / 255)
    assert MNISTData(tmp_path, channels=3, image_size=8)[0][0].shape == (3, 8, 8)
    # survives pickling into DataLoader workers
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[5][0], image)


def test_mnist_torchvision_layout_and_errors(tmp_path):
    images = np.zeros((3, 2, 2), np.uint8)
    _write_mnist(tmp_path / "MNIST" / "raw", "train", images, np.array([0, 1, 2], np.uint8), gz=False)
    assert len(MNISTData(tmp_path, split="train")) == 3
    with pytest.raises(FileNotFoundError, match=r"'t10k-images-idx3-ubyte' not found: looked for .*\.gz"):
        MNISTData(tmp_path, split="test")
    with pytest.raises(ValueError, match=r"split must be one of test, train .*got 'val'"):
        MNISTData(tmp_path, split="val")
    bad = tmp_path / "bad"
    _write_mnist(bad, "t10k", images, np.array([0, 1, 2], np.uint8), gz=False)
    (bad / "t10k-labels-idx1-ubyte").write_bytes(_idx_bytes(images, 2051))  # images where labels belong
    with pytest.raises(ValueError, match=r"magic number 2051 but 2049 was expected \(labels file\)"):
        MNISTData(bad)
    (bad / "t10k-labels-idx1-ubyte").write_bytes(_idx_bytes(np.array([0, 1], np.uint8), 2049))
    with pytest.raises(ValueError, match=r"holds 3 images but .* holds 2 labels"):
        MNISTData(bad)
    (bad / "t10k-images-idx3-ubyte").write_bytes(_idx_bytes(images, 2051)[:-3])
    with pytest.raises(ValueError, match="truncated"):
        MNISTData(bad)
    with pytest.raises(ValueError, match=r"class_names has 2 entries but the dataset has 10 classes"):
        MNISTData(tmp_path, split="train", class_names=["a", "b"])


# ----------------------------------------------------------------------------------------------- digits
def test_digits_split_sizes_disjoint_stratified_deterministic():
    test, train = DigitsData(split="test"), DigitsData(split="train")
    assert (len(test), len(train)) == (540, 1257) and test.name == "digits:test"
    test_ids = {test[i][2] for i in range(len(test))}
    train_ids = {train[i][2] for i in range(len(train))}
    assert not test_ids & train_ids and len(test_ids | train_ids) == 1797
    total = Counter(test.labels) + Counter(train.labels)
    for c, n in Counter(test.labels).items():
        assert abs(n - 0.3 * total[c]) <= 1  # stratified
    assert [test[i][2] for i in range(5)] == [DigitsData()[i][2] for i in range(5)]
    image, _, _ = _check_sample(test, 0)
    assert image.shape == (1, 16, 16) and float(image.max()) > 0.5
    assert DigitsData(image_size=None, channels=3)[0][0].shape == (3, 8, 8)
    with pytest.raises(ValueError, match=r"split must be train or test, got 'val'"):
        DigitsData(split="val")
    with pytest.raises(ValueError, match=r"test_fraction must be a number strictly between 0 and 1, got 1.5"):
        DigitsData(test_fraction=1.5)


# ---------------------------------------------------------------------------------------------- configs
def _load(name: str, **overrides):
    node = OmegaConf.load(CONF / f"{name}.yaml")
    node.pop("defaults", None)  # Hydra's defaults list (matching oracle etc.) is not an argument
    cfg = OmegaConf.create({"assets": str(ASSETS), "data": node})
    for k, v in overrides.items():
        OmegaConf.update(cfg, f"data.{k}", v)
    return instantiate(cfg.data)


def test_configs_instantiate(tmp_path):
    names = {p.stem for p in CONF.glob("*.yaml")}
    assert names >= {"digits", "cifar10_jpg", "cifar10", "mnist", "imagefolder"}
    ds = _load("digits")
    assert isinstance(ds, DigitsData) and len(ds) == 200  # the offline demo's preset: 200 of the 540 held-out digits
    assert len(_load("digits", limit=None)) == 540
    root = _write_folder(tmp_path / "imgs", {"a": 2, "b": 1})
    assert len(_load("imagefolder", root=str(root))) == 3
    with pytest.raises(Exception, match="root"):
        _load("imagefolder")  # root is mandatory (???)
    _write_mnist(tmp_path / "mn", "t10k", np.zeros((2, 3, 3), np.uint8), np.array([1, 2], np.uint8), gz=True)
    assert len(_load("mnist", root=str(tmp_path / "mn"))) == 2
    with pytest.raises(Exception, match="download=true"):  # Hydra wraps the FileNotFoundError
        _load("cifar10", root=str(tmp_path))


def test_cifar10_jpg_config():
    asset("cifar10/test-jpg")
    ds = _load("cifar10_jpg", limit=20)
    assert ds.name == "cifar10_jpg:test-jpg" and ds.class_names == CIFAR10_CLASSES and len(ds) == 20


# ---------------------------------------------------------------------------------- varied sizes (issue 14)
def test_varied_image_sizes_stop_before_the_first_batch_naming_two_files(tmp_path):
    root = _write_folder(tmp_path / "imgs", {"a": 2, "b": 1}, size=6)
    Image.new("RGB", (8, 5), (1, 2, 3)).save(root / "b" / "wide.png")
    with pytest.raises(ValueError, match=r"'a/000\.png' is 6x6 px but 'b/wide\.png' is 8x5 px.*data\.image_size="):
        ImageFolderData(root)  # image_size=None: refused when the dataset is built, from headers alone
    ds = ImageFolderData(root, image_size=8)  # the fix the message names
    assert torch.stack([ds[i][0] for i in range(len(ds))]).shape == (4, 3, 8, 8)
    (root / "b" / "wide.png").unlink()
    Image.new("L", (6, 6), 9).save(root / "b" / "grey.png")
    assert len(ImageFolderData(root)) == 4  # channels=3 converts grey to RGB: one size, one channel count
    with pytest.raises(ValueError, match=r"has 3 channel\(s\) but 'b/grey\.png' has 1.*data\.channels"):
        ImageFolderData(root, channels=None)


def test_varied_sizes_only_matter_among_the_selected_images(tmp_path):
    root = _write_folder(tmp_path / "imgs", {"a": 3, "b": 3}, size=6)
    Image.new("RGB", (9, 9)).save(root / "b" / "zzz.png")  # last in the dataset's order
    assert len(ImageFolderData(root, indices="0:6")) == 6  # the odd file is not selected
    (root / "a" / "broken.png").write_bytes(b"not a png")  # unreadable: reported when read, not here
    assert len(ImageFolderData(root, indices=":6")) == 6


# -------------------------------------------------------------------------------- duplicate class names
def test_duplicate_class_names_are_refused_with_the_names(tmp_path):
    root = _write_folder(tmp_path / "imgs", {"crane": 1, "dog": 1})
    with pytest.raises(ValueError, match=r"class names must be distinct, but 'crane' at positions \[0, 2\]"):
        ImageFolderData(root, class_names=["crane", "dog", "crane"])
    with pytest.raises(ValueError, match=r"'7' at positions \[7, 9\]"):
        DigitsData(class_names=[str(i) for i in range(9)] + ["7"])


# ---------------------------------------------------------------------------------------- data.indices
def test_indices_split_a_test_set_for_every_reader(tmp_path):
    root = _write_folder(tmp_path / "imgs", {"a": 4, "b": 4})
    ids = lambda ds: [ds.source_id(i) for i in range(len(ds))]  # noqa: E731
    first, second = ImageFolderData(root, indices="0:5"), ImageFolderData(root, indices="5:")
    assert ids(first) == ["a/000.png", "a/001.png", "a/002.png", "a/003.png", "b/000.png"]
    assert set(ids(first)).isdisjoint(ids(second)) and len(ids(first) + ids(second)) == 8
    assert ids(ImageFolderData(root, indices="-2:")) == ["b/002.png", "b/003.png"]
    # a file of source ids (e.g. copied from a run's samples.jsonl), with limit drawn inside it
    id_file = tmp_path / "ids.txt"
    id_file.write_text("# held-out half\nb/003.png\na/001.png\n\nb/000.png\n")
    part = ImageFolderData(root, indices=str(id_file))
    assert ids(part) == ["a/001.png", "b/000.png", "b/003.png"] and part.labels == [0, 1, 1]
    assert set(ids(ImageFolderData(root, indices=str(id_file), limit=2))) <= set(ids(part))
    digits = DigitsData(indices="100:200")
    assert len(digits) == 100 and ids(digits) == ids(DigitsData())[100:200]
    _write_mnist(tmp_path / "mn", "t10k", np.zeros((6, 2, 2), np.uint8), np.arange(6, dtype=np.uint8), gz=False)
    assert ids(MNISTData(tmp_path / "mn", indices="4:")) == ["test/00004", "test/00005"]
    assert ids(MNISTData(tmp_path / "mn", indices=[5, 1])) == ["test/00001", "test/00005"]
    with pytest.raises(ValueError, match=r"indices='9:' selects no sample of the 8"):
        ImageFolderData(root, indices="9:")
    with pytest.raises(FileNotFoundError, match=r"neither a range START:STOP .* nor an existing file"):
        ImageFolderData(root, indices="first-half")
    id_file.write_text("a/000.png\nc/000.png\n")
    with pytest.raises(ValueError, match=r"lists 1 source id\(s\) this dataset does not have, e.g. \['c/000.png'\]"):
        ImageFolderData(root, indices=str(id_file))
    with pytest.raises(ValueError, match=r"indices \[8\] lie outside 0..7"):
        ImageFolderData(root, indices=[0, 8])


def test_source_id_reads_no_image(tmp_path, monkeypatch):
    root = _write_folder(tmp_path / "imgs", {"a": 2, "b": 2})
    ds = ImageFolderData(root, limit=3)
    expected = [ds[i][2] for i in range(3)]
    monkeypatch.setattr(ImageFolderData, "_read", lambda self, i: (_ for _ in ()).throw(AssertionError("read")))
    assert [ds.source_id(i) for i in range(3)] == expected
    with pytest.raises(IndexError, match="out of range"):
        ds.source_id(3)
