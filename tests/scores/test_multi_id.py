"""Issue 43: effective robustness in logit or probit axes with the accuracy floor, and the multi-ID plane."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, logit, ndtr, ndtri

from genEval.comparisons.settings import ComparisonSettings
from genEval.interfaces import SettingError
from genEval.scores.effective_robustness import er_draws, fit_effective_robustness
from genEval.scores.multi_id import fit_plane, needed_baselines, plane_draws, plane_intervals

W, B = (0.7, 0.5), -0.3  # the plane the synthetic accuracies lie on (logit space)


def _on_plane(sa, w=W, b=B, f=logit, finv=expit):
    sa = np.asarray(sa, dtype=float) / 100
    return 100 * finv(f(sa) @ np.asarray(w) + b)


SA = [[60.0, 40.0], [70.0, 65.0], [80.0, 50.0], [90.0, 85.0], [75.0, 30.0]]  # 5 baselines, two ID sets


def test_plane_recovers_the_weights_of_accuracies_on_a_plane():
    off = [72.0, 55.0]
    pa = [*_on_plane(SA), _on_plane([off])[0] + 4.0]  # the sixth model lies 4 points above the plane
    fit = fit_plane(["b1", "b2", "b3", "b4", "b5", "x"], ["id1", "id2"], [*SA, off], pa, [True] * 5 + [False])
    assert fit.multi.weights == pytest.approx(list(W)) and fit.multi.b == pytest.approx(B)
    assert fit.multi.r2 == pytest.approx(1.0) and fit.multi.mae == pytest.approx(0.0, abs=1e-9)
    assert fit.multi.r2_loo == pytest.approx(1.0) and fit.multi.mae_loo == pytest.approx(0.0, abs=1e-9)
    assert fit.er_multi[:5] == pytest.approx([0.0] * 5, abs=1e-9) and fit.er_multi[5] == pytest.approx(4.0)
    assert fit.multi.mae_held_out == pytest.approx(4.0) and fit.multi.n_held_out == 1
    # the line over the first ID set alone cannot fit these baselines, whose PA depends on the second set too
    assert fit.single.r2 < 0.99 and fit.single.mae > 0.5 and fit.single.mae_loo > fit.single.mae
    assert fit.trusted and fit.space == "logit" and fit.fitted_on == [True] * 5 + [False]
    assert fit.equation() == "logit(PA) = 0.700 logit(SA[id1]) + 0.500 logit(SA[id2]) - 0.300"


def test_plane_in_probit_axes():
    pa = _on_plane(SA, f=ndtri, finv=ndtr)
    fit = fit_plane([f"m{i}" for i in range(5)], ["a", "b"], SA, list(pa), [True] * 5, scale="probit")
    assert fit.multi.weights == pytest.approx(list(W)) and fit.multi.b == pytest.approx(B)
    logit_fit = fit_plane([f"m{i}" for i in range(5)], ["a", "b"], SA, list(pa), [True] * 5, scale="logit")
    assert logit_fit.multi.r2 < 1.0 - 1e-6  # the same accuracies are not exactly on a logit plane


def test_plane_is_refused_with_too_few_baselines_naming_how_many_it_needs():
    assert needed_baselines(2) == 4 and needed_baselines(3) == 5
    with pytest.raises(ValueError, match=r"over 2 ID sets \(a, b\) has 3 coefficients and needs at least 4 baselines"):
        fit_plane(["m0", "m1", "m2", "m3"], ["a", "b"], SA[:4], list(_on_plane(SA[:4])), [True, True, True, False])
    with pytest.raises(ValueError, match=r"needs at least 2 ID sets"):
        fit_plane(["m0"], ["a"], [[50.0]], [40.0], [True])
    twins = [[60.0, 60.0], [70.0, 70.0], [80.0, 80.0], [90.0, 90.0]]  # the two sets rank every baseline alike
    with pytest.raises(ValueError, match=r"do not span the ID sets"):
        fit_plane(["m0", "m1", "m2", "m3"], ["a", "b"], twins, [40.0, 50.0, 60.0, 70.0], [True] * 4)


def test_a_baseline_below_the_floor_is_left_out_with_a_note():
    low = [3.0, 50.0]  # 3% on the first ID set
    sa = [*SA, low]
    pa = [*_on_plane(SA), 30.0]  # far off the plane: it would spoil the fit if it were used
    fit = fit_plane([f"m{i}" for i in range(6)], ["a", "b"], sa, pa, [True] * 6)
    assert fit.fitted_on == [True] * 5 + [False] and fit.multi.r2 == pytest.approx(1.0)
    assert fit.notes == [
        "baseline m5 left out of the fit: its SA on some ID set is below the 5% accuracy floor (Shi et al. 2023 "
        "discard such models; near chance the transformed axis is dominated by noise)"
    ]
    kept = fit_plane([f"m{i}" for i in range(6)], ["a", "b"], sa, pa, [True] * 6, floor=0.0)
    assert kept.fitted_on == [True] * 6 and kept.multi.r2 < 0.99
    line = fit_effective_robustness([3.0, 60.0, 70.0, 80.0], [40.0, 45.0, 55.0, 65.0], names=["low", "a", "b", "c"])
    assert line.below_floor == [True, False, False, False] and line.n_baselines == 3
    assert line.notes[0].startswith("baseline low left out of the fit: its SA is below the 5% accuracy floor")


def test_family_summaries_and_the_tau_between_single_and_multi_id():
    # baselines on the plane; four models off it by known amounts, in two families
    sa = [*SA, [70.0, 20.0], [70.0, 80.0], [85.0, 40.0], [60.0, 70.0]]
    offsets = [0.0] * 5 + [3.0, -1.0, 5.0, 1.0]
    pa = [p + o for p, o in zip(_on_plane(sa), offsets)]
    fams = ["std"] * 5 + ["f1", "f1", "f2", "f2"]
    fit = fit_plane([f"m{i}" for i in range(9)], ["a", "b"], sa, pa, [True] * 5 + [False] * 4, fams)
    assert fit.er_multi[5:] == pytest.approx(offsets[5:])
    by = {f.family: f for f in fit.family_er}
    assert by["f1"].n == 2 and by["f1"].multi_mean == pytest.approx(1.0)
    assert by["f1"].multi_std == pytest.approx(np.std([3.0, -1.0], ddof=1))
    assert by["std"].multi_mean == pytest.approx(0.0, abs=1e-9) and by["std"].n == 5
    from scipy.stats import kendalltau

    want = kendalltau(fit.er_single, fit.er_multi).statistic
    assert fit.tau == pytest.approx(want)
    f2 = [i for i, f in enumerate(fams) if f == "f2"]
    assert by["f2"].tau == pytest.approx(
        kendalltau([fit.er_single[i] for i in f2], [fit.er_multi[i] for i in f2]).statistic
    )
    assert by["std"].tau is not None and by["f2"].tau in (-1.0, 1.0)
    md = "\n".join(fit.markdown_lines())
    assert "| f1 | 2 |" in md and "| m5 | f1 | no |" in md and "+3.00" in md


def test_plane_intervals_refit_the_plane_per_draw():
    off = [72.0, 55.0]
    sa = np.array([*SA, off])
    pa = np.array([*_on_plane(SA), _on_plane([off])[0] + 4.0])
    fit = fit_plane([f"m{i}" for i in range(6)], ["a", "b"], sa.tolist(), pa.tolist(), [True] * 5 + [False])
    # two draws: the same accuracies, and a draw on another plane where the sixth model is still 4 points above
    w2, b2 = (0.5, 0.9), 0.1
    sa2 = sa + 1.0
    pa2 = np.array([*_on_plane(sa2[:5], w2, b2), _on_plane(sa2[5:], w2, b2)[0] + 4.0])
    out = plane_intervals(fit, np.stack([sa, sa2]), np.stack([pa, pa2]))
    assert (out.er_low[5], out.er_high[5]) == pytest.approx((4.0, 4.0))
    assert out.er_low[:5] == pytest.approx([0.0] * 5, abs=1e-9)
    few = plane_draws([True, True, True, False, False, False], sa[None], pa[None], "logit")
    assert np.isnan(few).all()  # three baselines cannot fit a plane over two sets


def test_probit_recovers_the_slope_of_millers_gaussian_latent_model():
    """Miller's thesis, section 4.7 (Theorem 6): y uniform on +-1, x | y ~ N(mu y, sigma^2 I); the shift
    mu' = alpha mu + beta Delta (Delta uniform on the sphere), sigma' = gamma sigma. Then
    probit(acc_D') ~ (alpha / gamma) probit(acc_D): the probit slope of linear classifiers is alpha / gamma = 0.7
    with the thesis's constants. Accuracies are measured on sampled test sets (the projection of x on the
    classifier is Gaussian, so it is sampled directly)."""
    rng = np.random.default_rng(0)
    d, sigma, alpha, beta, gamma, n_test = 100_000, 10**-1.5, 0.7, 0.5, 1.0, 20_000
    mu = rng.standard_normal(d)
    mu /= np.linalg.norm(mu)
    delta = rng.standard_normal(d)
    delta /= np.linalg.norm(delta)
    sa, pa = [], []
    for phi in np.linspace(1.525, 1.564, 12):  # classifiers at angle phi to mu: ID accuracies from ~59% to ~93%
        u = rng.standard_normal(d)
        u -= (u @ mu) * mu
        theta = np.cos(phi) * mu + np.sin(phi) * u / np.linalg.norm(u)
        for out, mean, scale in ((sa, theta @ mu, sigma), (pa, theta @ (alpha * mu + beta * delta), gamma * sigma)):
            y = rng.choice([-1.0, 1.0], n_test)
            t = y * mean + scale * rng.standard_normal(n_test)  # theta^T x for x ~ N(mean y, scale^2 I), |theta| = 1
            out.append(100.0 * float(np.mean(np.sign(t) == y)))
    fit = fit_effective_robustness(sa, pa, scale="probit")
    assert min(sa) < 65 and max(sa) > 90  # a spread of accuracies, as the thesis's testbed
    assert fit.w == pytest.approx(alpha / gamma, abs=0.05) and fit.r2 > 0.9 and fit.space == "probit"
    assert fit.curve(np.array([80.0]))[0] == pytest.approx(100 * ndtr(fit.w * ndtri(0.8) + fit.b))


def test_er_draws_in_probit_space_and_the_settings_spelling():
    sa = np.array([[60.0, 70.0, 80.0, 75.0]])
    pa = np.array([[*(100 * ndtr(0.8 * ndtri(np.array([0.6, 0.7, 0.8])) - 0.1)), 50.0]])
    er = er_draws([True, True, True, False], sa, pa, scale="probit")
    assert er[0, :3] == pytest.approx([0.0] * 3, abs=1e-9)
    assert er[0, 3] == pytest.approx(50.0 - 100 * ndtr(0.8 * ndtri(0.75) - 0.1))
    assert ComparisonSettings(er_scale="probit", er_floor=10).er_floor == 10.0
    with pytest.raises(SettingError, match=r"er.scale"):
        ComparisonSettings(er_scale="linear")
    with pytest.raises(SettingError, match=r"er.floor"):
        ComparisonSettings(er_floor=100)
    with pytest.raises(ValueError, match=r"unknown er.scale='linear'; choose one of logit, probit"):
        fit_effective_robustness([60.0, 70.0, 80.0], [50.0, 55.0, 60.0], scale="linear")
