"""The intervention zoo: training recipes of the digits models, checkpoints of ImageNet interventions in their
release layouts, and the conf/zoo presets (issue 19)."""

from __future__ import annotations

import pytest
import timm
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import get_method
from torchvision.models import get_model

from genEval.classifiers import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ROBUSTBENCH_IMAGENET,
    checkpoint_classifier,
    digits_classifier,
    digits_intervention,
    robustbench_classifier,
)
from genEval.classifiers.digits import train_subset
from genEval.classifiers.interventions import (
    RecipeSettings,
    add_gaussian_noise,
    augmix_views,
    jensen_shannon,
    pgd_attack,
)
from genEval.classifiers.robust import robust_state_dict, robustbench_path
from genEval.commands import CONF_DIR, BuildError, build, config_options
from genEval.data import DigitsData

TABLE2_ROWS = {
    "ResNet50 (vanilla)",
    "ANT",
    "SIN (the SIN+IN model)",
    "ANT+SIN",
    "DeepAugment",
    "AugMix",
    "DeepAugment+AugMix",
    "DAT",
}


def _test_digits() -> tuple[torch.Tensor, torch.Tensor]:
    test = DigitsData("test")
    return torch.stack([test[i][0] for i in range(len(test))]), torch.tensor(test.labels)


def _weights(clf) -> list[torch.Tensor]:
    return list(clf.model.state_dict().values())


# ------------------------------------------------------------------------------------------ digits recipes
def test_erm_recipe_is_the_plain_digits_training():
    erm = digits_intervention("erm", seed=0, epochs=1)
    plain = digits_classifier("cnn", seed=0, epochs=1)
    assert all(torch.equal(a, b) for a, b in zip(_weights(erm), _weights(plain)))
    assert erm.name == "digits_erm_cnn:seed0"


def test_every_recipe_trains_another_model_and_is_cached(monkeypatch):
    erm = _weights(digits_intervention("erm", seed=0, epochs=1))
    for recipe in ("gaussian_noise", "pgd", "augmix", "augmix_noise"):
        clf = digits_intervention(recipe, seed=0, epochs=1)
        assert not all(torch.equal(a, b) for a, b in zip(_weights(clf), erm)), recipe
        assert clf.name == f"digits_{recipe}_cnn:seed0" and not clf.training
        assert not any(p.requires_grad for p in clf.parameters())
    # a second call loads the cache (no training): the trainer is never reached
    import genEval.classifiers.digits as digits

    monkeypatch.setattr(digits, "_train_digits", lambda *a, **k: pytest.fail("trained again instead of loading"))
    again = digits_intervention("pgd", seed=0, epochs=1)
    assert again.name == "digits_pgd_cnn:seed0"
    # a recipe setting is part of the cache key: another eps is another model, so it would train
    with pytest.raises(pytest.fail.Exception, match="trained again"):
        digits_intervention("pgd", seed=0, epochs=1, eps=0.05)


def test_pgd_training_resists_pgd_and_noise_training_resists_noise():
    """What each intervention is for, measured on the held-out digits (3 epochs each)."""
    x, y = _test_digits()
    erm, pgd, noise = (digits_intervention(r, seed=0, epochs=3) for r in ("erm", "pgd", "gaussian_noise"))
    g = torch.Generator().manual_seed(0)

    def acc(clf, images) -> float:
        with torch.no_grad():
            return float((clf(images).argmax(1) == y).float().mean())

    def under_pgd(clf) -> float:
        clf.requires_grad_(False)
        return acc(clf, pgd_attack(clf, x, y, 0.1, 0.025, 7, torch.Generator().manual_seed(1)))

    # 3 epochs: 29.8% vs 16.9% under PGD; with the zoo's 15 epochs 65.7% vs 7.8% (noise: 94.3% vs 85.2% at 0.3)
    assert under_pgd(pgd) > under_pgd(erm) + 0.1
    noisy = add_gaussian_noise(x, (0.3,), g)
    assert acc(noise, noisy) > acc(erm, noisy) + 0.05


def test_pgd_attack_stays_in_the_ball_and_raises_the_loss():
    clf = digits_intervention("erm", seed=0, epochs=1)
    x, y = _test_digits()
    x, y = x[:64], y[:64]
    adv = pgd_attack(clf, x, y, 0.1, 0.025, 5, torch.Generator().manual_seed(0))
    assert (adv - x).abs().max() <= 0.1 + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    with torch.no_grad():
        assert F.cross_entropy(clf(adv), y) > F.cross_entropy(clf(x), y)


def test_noise_augmix_and_jensen_shannon():
    x = torch.rand(20, 1, 16, 16, generator=torch.Generator().manual_seed(0)) * 0.5 + 0.25
    noisy = add_gaussian_noise(x, (0.1,), torch.Generator().manual_seed(0))
    assert noisy.min() >= 0 and noisy.max() <= 1
    assert (noisy - x).std().item() == pytest.approx(0.1, rel=0.1)
    torch.manual_seed(0)
    view = augmix_views(x, RecipeSettings(augmix_group=4))
    assert view.shape == x.shape and view.min() >= 0 and view.max() <= 1 and not torch.allclose(view, x, atol=1e-2)
    z = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))
    assert jensen_shannon([z, z, z]).item() == pytest.approx(0.0, abs=1e-6)
    other = torch.randn(8, 10, generator=torch.Generator().manual_seed(1))
    assert jensen_shannon([z, other]).item() > 0.01
    assert jensen_shannon([z, other]).item() == pytest.approx(jensen_shannon([other, z]).item(), rel=1e-5)


def test_train_subset_is_stratified_and_the_errors_name_the_value():
    labels = torch.arange(100) % 10
    part = train_subset(labels, 0.3, seed=0)
    assert len(part) == 30 and torch.bincount(labels[part]).tolist() == [3] * 10
    assert torch.equal(train_subset(labels, 0.3, 0), part) and not torch.equal(train_subset(labels, 0.3, 1), part)
    with pytest.raises(ValueError, match=r"train_fraction must lie in \(0, 1\], got 0"):
        train_subset(labels, 0, 0)
    with pytest.raises(ValueError, match=r"unknown intervention recipe 'mixup'; choose one of erm, gaussian_noise"):
        digits_intervention("mixup")
    with pytest.raises(ValueError, match=r"pgd needs eps > 0.*got eps=0.0"):
        digits_intervention("pgd", eps=0)


# ------------------------------------------------------------------------------------------ release layouts
def _layouts(sd: dict) -> dict[str, object]:
    """The same torchvision weights in each release's layout (docs/comparing.md)."""
    stats = {"mean": torch.tensor(IMAGENET_MEAN), "std": torch.tensor(IMAGENET_STD)}
    return {
        "robustbench": {"state_dict": {f"model.{k}": v for k, v in sd.items()}},
        "robustbench_parallel": {f"module.model.{k}": v for k, v in sd.items()},
        "robustness_library": {
            "model": {
                **{f"module.model.{k}": v for k, v in sd.items()},
                **{f"module.attacker.model.{k}": v + 1 for k, v in sd.items()},
                "module.normalizer.new_mean": stats["mean"],
                "module.normalizer.new_std": stats["std"],
            },
            "epoch": 90,
        },
        "sin": {"state_dict": {f"module.{k}": v for k, v in sd.items()}, "epoch": 60},
        "game_of_noise": {"model_state_dict": dict(sd)},
        "imagenet_r": {"arch": "resnet18", "state_dict": {f"module.{k}": v for k, v in sd.items()}},
        "dat_bare": dict(sd),
        "dat_normalised": {"0.mean": stats["mean"], "0.std": stats["std"], **{f"1.{k}": v for k, v in sd.items()}},
    }


def test_every_release_layout_loads_into_torchvision(tmp_path):
    torch.manual_seed(0)
    ref = get_model("resnet18", weights=None).eval()
    sd = ref.state_dict()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        want = ref((x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
    for layout, obj in _layouts(sd).items():
        assert set(robust_state_dict(obj)) == set(sd), layout
        path = tmp_path / f"{layout}.pt"
        torch.save(obj, path)
        clf = checkpoint_classifier(path, arch="resnet18", input_size=64)
        with torch.no_grad():
            assert torch.allclose(clf(x), want, atol=1e-5), layout


def test_missing_and_mismatched_checkpoints_say_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        robustbench_classifier("Hendrycks2020AugMix", model_dir=tmp_path / "models")
    msg = str(err.value)
    assert str(tmp_path / "models" / "imagenet" / "corruptions" / "Hendrycks2020AugMix.pt") in msg
    assert "robustbench.utils.load_model(model_name='Hendrycks2020AugMix', dataset='imagenet'" in msg
    with pytest.raises(ValueError, match=r"unknown RobustBench ImageNet model 'Hendrycks2020Augmix'; known: .*"):
        robustbench_classifier("Hendrycks2020Augmix")
    with pytest.raises(FileNotFoundError, match=r"It comes from the game-of-noise release"):
        checkpoint_classifier(tmp_path / "ant.pth", source="the game-of-noise release")
    torch.save({"model_state_dict": get_model("resnet18", weights=None).state_dict()}, tmp_path / "r18.pth")
    with pytest.raises(
        ValueError, match=r"does not match the model architecture; missing keys: .*layer1\.0\.conv3\.weight"
    ):
        checkpoint_classifier(tmp_path / "r18.pth", arch="resnet50")


def test_robustbench_names_load_from_robustbench_locations(tmp_path):
    torch.manual_seed(0)
    sd = get_model("resnet50", weights=None).state_dict()
    for name in ("Hendrycks2020Many", "Wong2020Fast"):
        path = robustbench_path(name, tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"state_dict": {f"module.model.{k}": v for k, v in sd.items()}}, path)
    many = robustbench_classifier("Hendrycks2020Many", model_dir=tmp_path)
    fast = robustbench_classifier("Wong2020Fast", model_dir=tmp_path)
    assert robustbench_path("Wong2020Fast", tmp_path).parent.name == "Linf"  # its threat model's folder
    assert many.input_size == 224 and fast.input_size == 288 and many.name == "robustbench:Hendrycks2020Many"
    assert torch.equal(many.model.fc.weight, sd["fc.weight"]) and many(torch.rand(1, 3, 32, 32)).shape == (1, 1000)


# ------------------------------------------------------------------------------------------ conf/zoo presets
def _zoo(name: str, overrides: list[str] = ()):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("compare", overrides=[f"zoo={name}", *overrides]).zoo


@pytest.mark.parametrize("name", config_options("zoo"))
def test_every_zoo_composes_with_three_or_more_baselines_among_its_models(name):
    zoo = _zoo(name)
    assert zoo.title and len(zoo.classifiers) >= 2
    if zoo.baselines is not None:  # an ER zoo (every zoo but a data preset's plain set): >= 3 baselines of >= 4
        assert len(zoo.classifiers) >= 4
        assert set(zoo.baselines) <= set(zoo.classifiers) and len(zoo.baselines) >= 3
    for entry in zoo.classifiers.values():  # a config with its target, or the name of a conf/classifier preset
        if isinstance(entry, str):
            assert (CONF_DIR / "classifier" / f"{entry}.yaml").is_file(), entry
        else:
            assert callable(get_method(entry._target_))


def test_timm_zoo_names_are_timm_pretrained_tags_and_build():
    zoo = _zoo("imagenet_timm")
    names = [e.name for e in zoo.classifiers.values()]
    assert "resnet50.tv_in1k" in names and "resnet50.am_in1k" in names
    for n in names:
        assert n in timm.list_pretrained(n.split(".")[0] + ".*"), n
    clf = build(zoo.classifiers.augmix_jsd, "zoo", pretrained=False)  # random weights: no download
    assert clf.name == "timm:resnet50.am_in1k:random" and clf(torch.rand(1, 3, 32, 32)).shape == (1, 1000)


def test_robustbench_zoo_and_table2_zoo_cover_the_documented_rows(tmp_path):
    rb = _zoo("imagenet_robustbench")
    rb_names = [e.name for e in rb.classifiers.values() if e._target_.endswith("robustbench_classifier")]
    assert set(rb_names) <= set(ROBUSTBENCH_IMAGENET) and len(rb_names) >= 8
    covered = {ROBUSTBENCH_IMAGENET[n].table2 for n in rb_names} - {None}
    assert covered == {"ResNet50 (vanilla)", "SIN (the SIN+IN model)", "AugMix", "DeepAugment+AugMix"}
    t2 = _zoo("imagenet_table2", [f"zoo.model_dir={tmp_path}", f"zoo.files.ant={tmp_path / 'ant.pth'}"])
    assert set(t2.classifiers) >= {"vanilla", "ant", "sin", "ant_sin", "deepaugment", "augmix", "deepaugment_augmix"}
    assert "dat" in t2.classifiers and len(TABLE2_ROWS) == 8
    # the entries load their files: ANT from a game-of-noise layout, SIN from RobustBench's location
    torch.manual_seed(0)
    sd = get_model("resnet50", weights=None).state_dict()
    torch.save({"model_state_dict": sd}, tmp_path / "ant.pth")
    path = robustbench_path("Geirhos2018_SIN_IN", tmp_path)
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"module.{k}": v for k, v in sd.items()}}, path)
    assert build(t2.classifiers.ant, "zoo").name == "ANT"
    assert build(t2.classifiers.sin, "zoo").name == "robustbench:Geirhos2018_SIN_IN"
    with pytest.raises(BuildError, match=r"ImageNet-R release \(Hendrycks et al\. 2021") as err:
        build(t2.classifiers.deepaugment, "zoo")
    assert isinstance(err.value.__cause__, FileNotFoundError)


def test_digits_zoo_entries_build_and_none_is_an_oracle_member():
    zoo = _zoo("digits_interventions")
    recipes = {e.recipe for e in zoo.classifiers.values()}
    assert {"erm", "gaussian_noise", "pgd", "augmix"} <= recipes
    assert all(zoo.classifiers[b].recipe == "erm" for b in zoo.baselines)
    for name in ("erm_tenth", "gaussian_noise"):
        clf = build(zoo.classifiers[name], "zoo", epochs=1)
        assert clf(torch.rand(2, 1, 16, 16)).shape == (2, 10)
