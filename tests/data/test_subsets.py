"""Fresh samples every run (issue 10 §3): seeded random class-balanced subsets, drawn from the run's seed."""

from __future__ import annotations

from collections import Counter

import pytest
from scipy.stats import chisquare

from genEval import evaluate
from genEval.data.base import ImageData, SubsetData
from genEval.data.standard import DigitsData
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.assets import ASSETS
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator


def ids(ds) -> list[str]:
    return [ds.source_id(i) for i in range(len(ds))]


def test_random_subset_is_seeded_class_balanced_and_a_prefix():
    a, b = DigitsData(limit=30).with_seed(1), DigitsData(limit=30).with_seed(2)
    assert Counter(a.labels) == Counter(b.labels) == {c: 3 for c in range(10)}  # class-balanced either way
    assert set(ids(a)) != set(ids(b))  # another seed, other source images
    assert ids(a) == ids(DigitsData(limit=30).with_seed(1))  # the same seed, the same images
    assert ids(DigitsData(limit=40).with_seed(1))[:30] == ids(a)  # limit=N is a prefix of limit=N+k
    first = DigitsData(limit=30, subset="first")
    everything = DigitsData()
    first_of_class = [everything.source_id(everything.labels.index(c)) for c in range(10)]
    assert ids(first)[:10] == first_of_class  # the dataset's first image of each class, in label order
    assert first.with_seed(5) is first and set(ids(first)) != set(ids(a))
    assert first.subset_info() == {"mode": "first", "seed": None, "limit": 30, "indices": None, "pool": 540}


def test_subset_seed_fixes_the_draw_and_with_seed_leaves_it():
    fixed = DigitsData(limit=20, subset_seed=11)
    assert fixed.with_seed(3) is fixed and fixed.subset_info()["seed"] == 11
    assert ids(fixed) == ids(DigitsData(limit=20).with_seed(11))
    unseeded = DigitsData(limit=20)
    assert unseeded.subset_info()["seed"] == 0  # before a run seeds it: the draw of seed 0
    drawn = unseeded.with_seed(4)
    assert drawn is not unseeded and drawn.subset_info() == {
        "mode": "random",
        "seed": 4,
        "limit": 20,
        "indices": None,
        "pool": 540,
    }
    assert "subset=random@seed4" in repr(drawn)
    assert DigitsData().with_seed(4).subset_info()["mode"] == "all"  # no limit: nothing to draw


def test_subset_data_keeps_positions_when_reseeded():
    base = DigitsData(limit=20)
    fit, score = SubsetData(base, range(0, 5), "fit"), SubsetData(base, range(5, 20), "score")
    f7, s7 = fit.with_seed(7), score.with_seed(7)
    drawn = base.with_seed(7)
    assert ids(f7) == ids(drawn)[:5] and ids(s7) == ids(drawn)[5:]  # still disjoint parts of one draw
    assert f7.subset_info()["seed"] == 7 and f7.name == "digits:test[fit]"


def _roles():
    return dict(
        classifier=LinearClassifier(in_features=12, num_classes=10),
        generator=SigmoidGenerator(),
        oracle=AcceptAllOracle(),
    )


def test_unseeded_runs_evaluate_other_sources_and_one_seed_shares_them():
    data = DigitsData(limit=10, image_size=2, channels=3)
    search = SearchConfig(budget=1, step_size=0.1, start_noise=0)
    run = lambda seed=None: evaluate(
        data=data, search=search, seed=seed, execution=Execution(batch_size=10), **_roles()
    )  # noqa: E731
    r1, r2 = run(), run()
    src = lambda r: [s.source_id for s in r.samples]  # noqa: E731
    assert r1.seed != r2.seed and set(src(r1)) != set(src(r2))
    assert src(r1) == ids(data.with_seed(r1.seed))  # the draw of the run's recorded seed
    chosen = r1.extra["identity"]["sources"]["selection"]  # recorded with the results: how they were drawn
    assert chosen == {"mode": "random", "seed": r1.seed, "limit": 10, "indices": None, "pool": 540}
    other_model = evaluate(
        data=data,
        search=search,
        seed=r1.seed,
        execution=Execution(batch_size=10),
        **{**_roles(), "classifier": LinearClassifier(in_features=12, num_classes=10, seed=5)},
    )
    assert src(other_model) == src(r1)  # compare: all models of one repetition share the draw
    first = DigitsData(limit=10, image_size=2, channels=3, subset="first")
    assert [
        s.source_id for s in evaluate(data=first, search=search, execution=Execution(batch_size=10), **_roles()).samples
    ] == ids(first)


def test_cifar10_taef2_recipe_draws_other_images_for_other_seeds():
    """`geneval experiment=cifar10_taef2 data.limit=30`, twice unseeded: the data object the CLI builds."""
    if not ASSETS.exists():
        pytest.skip("../shared/assets is absent")
    from hydra import compose, initialize_config_dir

    from genEval.commands import CONF_DIR, build

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=cifar10_taef2", "data.limit=30"])
    assert cfg.data.subset == "random" and cfg.data.subset_seed is None
    data = build(cfg.data, "data")
    a, b = data.with_seed(1234), data.with_seed(98765)
    assert len(a) == len(b) == 30 and Counter(a.labels) == {c: 3 for c in range(10)}
    assert len(set(ids(a)) & set(ids(b))) < 5  # 30 of 10,000: almost surely disjoint draws


class _OneImagePerClass(ImageData):
    """100 classes x 1 image, as a folder of 100 class sub-folders with one picture each (labels only)."""

    name = "hundred"

    def __init__(self, limit: int, classes: int = 100, per_class: int = 1) -> None:
        super().__init__(image_size=None, channels=None, limit=limit)
        self.class_names = [f"c{k}" for k in range(classes)]
        self._select([k for k in range(classes) for _ in range(per_class)])

    def _read(self, index: int):
        raise AssertionError("the draw must not read images")

    def _source_id(self, index: int) -> str:
        return f"img{index:04d}"


def test_random_draw_chooses_the_classes_too_not_the_lowest_numbered():
    """Issue 20: with data.limit below the number of classes the classes themselves are drawn from the seed."""
    data = _OneImagePerClass(limit=20)
    a, b, c = (set(data.with_seed(s).labels) for s in (1, 2, 3))
    assert len(a) == 20 and a != b and b != c  # three seeds, three class sets (they were all 0..19 before)
    assert a != set(range(20))
    hits = Counter(y for s in range(500) for y in data.with_seed(s).labels)
    counts = [hits.get(k, 0) for k in range(100)]
    # every class equally likely: 500 draws x 20 of 100 -> 100 each (sd about 9); the label-order walk gives
    # 500 to classes 0..19 and 0 to the rest
    assert min(counts) > 0 and chisquare(counts).pvalue > 1e-3
    assert data.with_seed(1).subset_info()["mode"] == "random"


def test_random_draw_spreads_the_extra_samples_and_stays_a_balanced_prefix():
    data = _OneImagePerClass(limit=15, classes=10, per_class=5)
    extra = Counter()
    for s in range(300):
        drawn = Counter(data.with_seed(s).labels)
        assert sorted(drawn.values()) == [1] * 5 + [2] * 5  # 15 of 10 classes: five get a second sample
        extra.update(k for k, n in drawn.items() if n == 2)
        longer = _OneImagePerClass(limit=23, classes=10, per_class=5).with_seed(s)
        assert [longer.source_id(i) for i in range(15)] == ids(data.with_seed(s))  # limit=N prefixes limit=N+k
    assert chisquare([extra[k] for k in range(10)]).pvalue > 1e-3  # not always classes 0..4
    first = _OneImagePerClass(limit=15, classes=10, per_class=5)
    first.subset = "first"
    first._draw()
    assert first.labels == list(range(10)) + list(range(5))  # subset=first keeps the label order
