"""What a run is: its identity (``run.json``), its shard, and where and with what it ran.

:class:`RunIdentity` is written to ``run.json`` when a run starts and copied into ``results.json`` (under
``identity``): the config minus execution settings, the component ids, the seed, the sources (:class:`RunSources`)
and the shard (:class:`Shard`). A rerun on the same directory resumes only when its identity is the same
(:meth:`RunIdentity.differences` names what differs); the shards of one evaluation share
:meth:`RunIdentity.of_evaluation`. ``from_dict(d).to_dict() == d`` for every identity genEval wrote, so a hash of
the typed identity equals the hash of what ``run.json`` holds (the oracle audit's run id relies on it).
"""

from __future__ import annotations

import hashlib
import json
import platform
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any

import torch

PACKAGES = (
    "geneval-fmr",
    "torch",
    "torchvision",
    "hydra-core",
    "open_clip_torch",
    "timm",
    "diffusers",
    "scikit-learn",
    "taming-transformers-rom1504",
    "numpy",
    "scipy",
    "safetensors",
    "pillow",
)


def package_versions() -> dict[str, str]:
    """The Python version and the versions of :data:`PACKAGES` ("not installed" when absent)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def environment(device: str) -> dict[str, Any]:
    """Where a run ran: platform, host, device (and its GPU), torch threads."""
    env: dict[str, Any] = {
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "device": device,
        "torch_threads": torch.get_num_threads(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env


def config_hash(config: dict[str, Any]) -> str:
    """16 hex digits of the sha256 of a config's canonical JSON (sorted keys): a version id for presets."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Shard:
    """Part ``index`` of ``count`` of a data set: the sources at positions ``index, index + count, ...``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        for key in ("index", "count"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"shard.{key} must be a whole number, got {v!r}.")
        if self.count < 1:
            raise ValueError(f"shard.count must be >= 1, got {self.count}; use shard.count=1 for no sharding.")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"shard.index={self.index} must lie in 0..{self.count - 1} (shard.count={self.count}); "
                "shards are numbered from 0."
            )

    def positions(self, n: int) -> list[int]:
        return list(range(self.index, n, self.count))

    @property
    def name(self) -> str:
        return f"shard-{self.index}-of-{self.count}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Shard:
        """From ``{"index": i, "count": n}`` (None or a missing key: the whole data set)."""
        d = d or {}
        return cls(int(d.get("index", 0)), int(d.get("count", 1)))

    def to_dict(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}


@dataclass(frozen=True)
class RunSources:
    """The sources a run evaluates: the data set's id, its size ``n_total``, the ``n`` positions of the run's shard,
    how they were chosen (``selection``, e.g. a random class-balanced subset and its seed; None when the data do not
    say) and the sha256 of their source ids in position order (None when the data do not name them)."""

    data: str = ""
    n_total: int | None = None
    n: int | None = None
    selection: Mapping[str, Any] | None = None
    sha256: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> RunSources:
        d = d or {}
        return cls(
            data=str(d.get("data", "")),
            n_total=None if d.get("n_total") is None else int(d["n_total"]),
            n=None if d.get("n") is None else int(d["n"]),
            selection=d.get("selection"),
            sha256=d.get("sha256"),
        )

    def to_dict(self) -> dict[str, Any]:
        """As ``run.json`` holds it: the keys that were recorded (a None is left out)."""
        d = {
            "data": self.data,
            "n_total": self.n_total,
            "n": self.n,
            "selection": self.selection,
            "sha256": self.sha256,
        }
        return {k: v for k, v in d.items() if v is not None}

    @property
    def limit_beyond_pool(self) -> tuple[int, int] | None:
        """``(limit, pool)`` when the run asked for more sources (``data.limit``) than its pool holds, else None."""
        sel = self.selection or {}
        limit, pool = sel.get("limit"), sel.get("pool")
        return (int(limit), int(pool)) if limit is not None and pool is not None and limit > pool else None


class RunMismatch(ValueError):
    """The run directory holds a run of another configuration."""


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, Mapping):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def identity_differences(a: Mapping, b: Mapping) -> list[str]:
    """Dotted keys whose values differ between two identities as dicts (``key: old -> new``)."""
    fa, fb = _flatten(a), _flatten(b)
    return [
        f"{k}: {fa.get(k, '<absent>')!r} -> {fb.get(k, '<absent>')!r}"
        for k in sorted(set(fa) | set(fb))
        if fa.get(k, "<absent>") != fb.get(k, "<absent>")
    ]


@dataclass(frozen=True)
class RunIdentity:
    """What a run is (see the module docstring). ``config``: the run's config minus execution settings (the CLI's
    resolved config, or a notebook run's settings; free-form, compared key by key); ``components``: role -> component
    id (``classifier``, ``generator``, ``oracle``, ``data``, ``mask``); ``extra``: keys of a ``run.json`` this genEval
    does not know, kept so that the identity reads back as written."""

    config: Mapping[str, Any]
    components: Mapping[str, str]
    seed: int
    sources: RunSources = field(default_factory=RunSources)
    shard: Shard = field(default_factory=Shard)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "run.json") -> RunIdentity:
        """From the ``identity`` of ``run.json`` (or of results.json); one that is not an identity is refused,
        naming ``where``."""
        if not isinstance(d, Mapping) or not isinstance(d.get("components"), Mapping) or "seed" not in d:
            raise ValueError(
                f"{where} holds no run identity (a mapping with components and seed); it was not written by "
                "genEval. Move the directory away and rerun."
            )
        known = ("config", "components", "seed", "sources", "shard")
        return cls(
            config=dict(d.get("config") or {}),
            components={str(k): str(v) for k, v in d["components"].items()},
            seed=int(d["seed"]),
            sources=RunSources.from_dict(d.get("sources")),
            shard=Shard.from_dict(d.get("shard")),
            extra={k: v for k, v in d.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``run.json`` stores it."""
        return {
            "config": dict(self.config),
            "components": dict(self.components),
            "seed": self.seed,
            "sources": self.sources.to_dict(),
            "shard": self.shard.to_dict(),
            **self.extra,
        }

    def differences(self, other: RunIdentity) -> list[str]:
        """Dotted keys whose values differ from ``other``'s, as ``key: mine -> other's``."""
        return identity_differences(self.to_dict(), other.to_dict())

    def of_evaluation(self) -> RunIdentity:
        """What every shard of one evaluation shares: this identity without the shard's index and without what
        only its own sources have (their number and hash)."""
        sources = RunSources(self.sources.data, self.sources.n_total, selection=self.sources.selection)
        return replace(self, shard=Shard(0, self.shard.count), sources=sources)

    def source_positions(self, source_ids: Sequence[str] | None = None) -> dict[int, str | None] | None:
        """Position -> source id (None when unknown) of the sources this run evaluates (its shard's positions of
        ``sources.n_total``), with ``source_ids`` (in position order) when known; None when the identity does not
        record the data set's size."""
        if self.sources.n_total is None:
            return None
        positions = self.shard.positions(self.sources.n_total)
        if source_ids is not None and len(source_ids) == len(positions):
            return dict(zip(positions, map(str, source_ids)))
        return dict.fromkeys(positions)
