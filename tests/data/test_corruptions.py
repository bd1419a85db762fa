"""Issue 43: the ImageNet-C corruptions of genEval.data.corruptions: seeded, side-effect free, exact at small sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import genEval.data.corruptions as corruptions
from genEval.data import DigitsData
from genEval.data.corruptions import CORRUPTIONS, FAMILIES, CorruptedData, corrupt_image, family_of, image_seed


def _grey(side: int, channels: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(side)
    return torch.randint(0, 256, (channels, side, side), generator=g).float() / 255.0  # exact in uint8


def test_the_fifteen_imagenet_c_corruptions_in_four_families():
    assert len(CORRUPTIONS) == 15 and set(FAMILIES) == {"noise", "blur", "weather", "digital"}
    assert family_of("glass_blur") == "blur" and family_of("jpeg_compression") == "digital"
    import imagecorruptions

    assert list(CORRUPTIONS) == imagecorruptions.get_corruption_names("common")  # the package's own list


def test_without_a_corruption_the_round_trip_is_exact(monkeypatch):
    """The plumbing around the package (uint8, RGB for grey images, up-sampling to 32 px and back) changes nothing
    when the corruption itself changes nothing."""
    monkeypatch.setattr(corruptions, "_package", lambda: type("P", (), {"corrupt": staticmethod(lambda x, **_: x)}))
    for img in (_grey(16), _grey(8), _grey(32, 3), _grey(16, 3)):
        out = corrupt_image(img, "contrast", 3, seed=0)
        assert out.shape == img.shape and torch.allclose(out, img, atol=1e-6)


def test_corruptions_are_seeded_and_leave_numpy_s_global_rng_alone():
    img = DigitsData(split="test", image_size=16, channels=1)[0][0]
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = corrupt_image(img, "gaussian_noise", 3, seed=7)
    assert np.array_equal(np.random.get_state()[1], before)  # the caller's RNG is untouched
    assert torch.equal(a, corrupt_image(img, "gaussian_noise", 3, seed=7))
    assert not torch.equal(a, corrupt_image(img, "gaussian_noise", 3, seed=8))
    assert a.shape == (1, 16, 16) and 0 <= float(a.min()) and float(a.max()) <= 1
    assert (a - img).abs().mean() > 0.02  # it does corrupt
    assert torch.equal(corrupt_image(img, "glass_blur", 1, seed=7), corrupt_image(img, "glass_blur", 1, seed=7))
    assert (
        image_seed(0, "test/00001", "fog", 2)
        == image_seed(0, "test/00001", "fog", 2)
        != image_seed(1, "test/00001", "fog", 2)
    )


def test_bad_corruptions_are_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown corruption\(s\) \['rain'\]; choose from gaussian_noise"):
        corrupt_image(_grey(16), "rain", 1, 0)
    with pytest.raises(ValueError, match=r"severities \[6\] must be whole numbers in 1..5"):
        corrupt_image(_grey(16), "fog", 6, 0)
    with pytest.raises(ValueError, match=r"one \(C, H, W\) image with C = 1 or 3"):
        corrupt_image(torch.rand(2, 16, 16), "fog", 1, 0)


def test_corrupted_data_keeps_the_sources_and_draws_a_severity_per_image():
    base = DigitsData(split="test", image_size=16, channels=1, limit=12, subset="first")
    noisy = CorruptedData(base, "gaussian_noise", [1, 5], seed=0)
    assert len(noisy) == 12 and noisy.class_names == base.class_names and noisy.name.endswith("+gaussian_noise@1-5")
    for i in range(3):
        x, y, sid = noisy[i]
        bx, by, bsid = base[i]
        assert (y, sid) == (by, bsid) and torch.equal(x, noisy[i][0]) and not torch.equal(x, bx)
    assert {noisy.severity_of(base.source_id(i)) for i in range(12)} == {1, 5}


def test_small_images_are_corrupted_at_32_px_and_averaged_back(monkeypatch):
    def bright_corner(x, **_):  # +64 grey levels on the top-left 32-px pixel only
        y = x.astype(float)
        y[0, 0] += 64
        return y

    monkeypatch.setattr(corruptions, "_package", lambda: type("P", (), {"corrupt": staticmethod(bright_corner)}))
    img = torch.full((1, 16, 16), 64 / 255)
    out = corrupt_image(img, "contrast", 1, seed=0)
    assert out[0, 0, 0] == pytest.approx(80 / 255, abs=1e-6)  # one of its 2x2 pixels, +64, averaged into it
    assert torch.allclose(out[0].flatten()[1:], img[0].flatten()[1:])
