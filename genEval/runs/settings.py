"""The settings a run is made with and records: :class:`SearchConfig` (``conf/search``) and what it writes,
:class:`RunOutput` (``conf/output``).

They live with the run format, below the search that uses them, so that a run's recorded configuration reads back
typed (:attr:`genEval.runs.results.RunConfig.search`); ``genEval.search.perturb.SearchConfig`` is the same class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from genEval.validation import SettingError, is_whole

UPDATE_RULES = ("adam", "sgd", "sign")


def _bad(key: str, value: Any, expected: str, example: str, note: str = "") -> Any:
    raise SettingError(f"search.{key}", value, expected, example, note)


@dataclass
class SearchConfig:
    """How the latent search runs. Paper preset: ``step_size=0.001``, ``budget=50``.

    update: ``adam`` (lr = step_size, per-sample moments), ``sgd`` (z += a*g) or ``sign`` (z += a*sign(g)).
    start_noise: std of the seeded Gaussian start noise per latent dim, in steps: ``start_noise * step_size``
        (0 = none). A 50-step Adam search moves each dim by at most ``50 * step_size``, so the noise is sized
        against the search it precedes, not against the latent's spread (``0.05 x std`` was 0.042 per dim on
        TAEF2, as far as the whole search goes). Default 1 step, chosen by measurement on the CIFAR-10 recipe
        (``benchmarks/cifar_recipe_studies.py --only start_noise``; docs/scores.md, "Defaults, measured").
    early_stop: stop a sample once the classifier is fooled (paper: off, the whole budget is spent).
    fgsm_start: when > 0, start from the FGSM image ``clip(x + eps*sign(grad_x CE))`` (paper App. E).
    """

    budget: int = 50
    step_size: float = 1e-3
    update: str = "adam"
    start_noise: float = 1.0
    early_stop: bool = False
    fgsm_start: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8

    def __post_init__(self) -> None:
        b = self.budget
        if not is_whole(b, 0):
            _bad("budget", self.budget, "a whole number >= 0", "50", "the paper preset; 0 perturbs nothing")
        self.budget = int(self.budget)
        for key, example in (("step_size", "0.001"), ("start_noise", "1"), ("fgsm_start", "0")):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0:
                _bad(key, v, "a number >= 0", example)
        if not isinstance(self.early_stop, bool):
            _bad("early_stop", self.early_stop, "true or false", "false", "the paper spends the whole budget")
        if self.update not in UPDATE_RULES:
            raise ValueError(
                f"unknown search.update={self.update!r}; choose one of {', '.join(UPDATE_RULES)} "
                "(e.g. search.update=adam)."
            )
        betas = self.adam_betas
        if (
            not isinstance(betas, (list, tuple))
            or len(betas) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas)
        ):
            _bad("adam_betas", betas, "two numbers in [0, 1)", "[0.9,0.999]")
        if isinstance(self.adam_eps, bool) or not isinstance(self.adam_eps, (int, float)) or not self.adam_eps > 0:
            _bad("adam_eps", self.adam_eps, "a number > 0", "1e-8")
        self.adam_betas = tuple(float(b) for b in self.adam_betas)  # type: ignore[assignment]

    @classmethod
    def coerce(cls, search: SearchConfig | Mapping[str, Any] | None) -> SearchConfig:
        """The one way to get a SearchConfig: from itself, a mapping of its fields (a config node made
        plain, its ``_target_`` naming this class allowed), or None (the paper preset). Unknown keys are named in
        the error."""
        if search is None:
            return cls()
        if isinstance(search, cls):
            return search
        if not isinstance(search, Mapping):
            raise ValueError(f"search must be a SearchConfig or a mapping of its fields, got {type(search).__name__}.")
        search = {k: v for k, v in search.items() if k != "_target_" or not cls._names_me(v)}
        unknown = sorted(set(search) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown search setting(s) {unknown}; known: {', '.join(f.name for f in fields(cls))}.")
        return cls(**search)

    @classmethod
    def _names_me(cls, target: Any) -> bool:
        """Whether ``target`` (a node's ``_target_``: ``conf/search/default.yaml`` is built by Hydra like any role)
        names this class, under its own path or the search's re-export (``genEval.search.perturb.SearchConfig``),
        compared as text (nothing a config names is imported here). Another target stays an unknown key, named in
        the error."""
        return str(target) in (f"{cls.__module__}.{cls.__qualname__}", f"genEval.search.perturb.{cls.__qualname__}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as a run records it (``adam_betas`` as a list)."""
        return {**asdict(self), "adam_betas": list(self.adam_betas)}

    @classmethod
    def recorded(cls, values: Mapping[str, Any] | None) -> SearchConfig | None:
        """The search a run recorded (results.json ``config.search``), None when it recorded none; keys this
        genEval does not know (written by another version) are left out, missing ones take their defaults."""
        if not values:
            return None
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


@dataclass(frozen=True)
class RunOutput:
    """What a run writes and shows. ``dir``: the run directory (None: nothing is written, the result is returned
    only). ``save_latents`` / ``save_images``: stream E(x) and the final latent / the uint8 original and perturbed
    image of every sample to it (for ``fit-mask`` / ``export``). ``grid_size``: validated samples in ``grid.png``
    (0: none). ``progress``: a bar (True), log lines every ``log_interval`` seconds (False), or a bar on a
    terminal only (None). The node ``conf/output`` builds it (the command passes ``dir``); ``save_latents=``,
    ``save_images=`` and ``progress=`` are its short spellings at the top level of a command's config."""

    dir: str | Path | None = None
    save_latents: bool = False
    save_images: bool = False
    grid_size: int = 8
    progress: bool | None = None
    log_interval: float = 30.0

    def __post_init__(self) -> None:
        for key in ("save_latents", "save_images", "progress"):
            value = getattr(self, key)
            if not isinstance(value, bool) and not (key == "progress" and value is None):
                raise SettingError(key, value, "true or false" + (" or null" if key == "progress" else ""), "true")
        if not is_whole(self.grid_size, 0):
            raise SettingError("grid_size", self.grid_size, "a whole number >= 0", "8")
        interval = self.log_interval
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval >= 0:
            raise SettingError("log_interval", interval, "a number of seconds >= 0", "30", "0: a line per sample")

    @classmethod
    def coerce(cls, value: RunOutput | str | Path | None) -> RunOutput:
        """From itself, a run directory (str or Path), or None (no directory)."""
        if isinstance(value, cls):
            return value
        if value is None or isinstance(value, (str, Path)):
            return cls(dir=value)
        raise ValueError(f"output must be a RunOutput or a run directory, got {type(value).__name__}.")

    def to_dict(self) -> dict[str, Any]:
        """What a run records of it (its directory is the run's own place, not a setting)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "dir"}
