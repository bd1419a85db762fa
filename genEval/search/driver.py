"""The driver: one evaluation from its settings to its result (the loop itself is in ``perturb.py``).

``evaluate(classifier=..., data=..., generator=..., oracle=...)`` runs the paper's dynamic evaluation (Sec. 3) over a
data set and returns an :class:`~genEval.runs.results.EvalResult`; with ``output=RunOutput(dir=...)`` (or a run
directory as ``output``) it also writes the run directory described in :mod:`genEval.runs.writer`. The CLI
(``geneval``) calls this same function, so notebook and command line give identical results for identical inputs
and seeds.

Its settings come in bundles: :class:`~genEval.search.perturb.SearchConfig` (the search),
:class:`~genEval.search.execution.Execution` (device, batch size, precision, compile),
:class:`~genEval.runs.recording.RunOutput` (what is written and shown) and
:class:`~genEval.scores.run_scores.Scoring` (intervals and warnings); a mask config resolves itself
(:mod:`genEval.masks.configs`). Every setting has one spelling, in its bundle. Read top to bottom, :func:`evaluate`
is the method: seed, mask, sources, identity, roles, batch size, then the loop with its recording and progress,
then the summary.

Scale-out and crash safety (every decision exact):

* Every random draw of a sample is seeded from ``(run seed, source id)`` (:func:`~genEval.search.sources.sample_seed`),
  never from its batch, so ``batch_size`` and sharding change no decision.
* ``shard=Shard(i, n)`` evaluates the sources at positions ``i, i+n, i+2n, ...`` of the data set (whole source
  images; with ``data.limit`` the positions of the class-balanced order, so every shard is balanced too).
  ``genEval.runs.shards`` combines the shards into the run an unsharded evaluation would have written.
* A rerun on a directory holding an unfinished run of the same identity resumes it
  (:class:`~genEval.runs.recording.Recording`): recorded samples are not recomputed, and the final files hold the
  decisions and scores of an uninterrupted run (the measured distances, oracle scores and confidences up to float
  noise: the resumed samples share a batch with other neighbours, and a batch of 5 rounds differently from a batch
  of 1).
* A source that cannot be decoded (:class:`~genEval.interfaces.UnreadableSource`) stops the run with that error,
  unless the data set has ``skip_unreadable`` set: then it is logged, left out of the samples and listed (position,
  source id, path, reason) under ``skipped`` in the results. Whether a file decodes depends on its bytes only, so
  the same sources are skipped whatever the batch size, the shard or the number of resumes (a resume reads the
  skipped files again and lists them again; ``data.skip_unreadable`` may be switched on to resume a run that
  stopped at a corrupt file).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from genEval.interfaces import Classifier, Generator, ImageDataset, Oracle, UnreadableSource, component_id, hook
from genEval.masks import mask_config
from genEval.runs.identity import RunIdentity, RunSources, Shard
from genEval.runs.reader import RUN, read_run_identity
from genEval.runs.recording import Recording, RunOutput
from genEval.runs.results import EvalResult, RunConfig
from genEval.runs.summary import summarize
from genEval.scores.run_scores import Scoring
from genEval.search.batching import auto_batch_size, is_out_of_memory, too_large
from genEval.search.execution import EXECUTION_FIELDS, Execution, accelerate
from genEval.search.ood import ood_confidence
from genEval.search.perturb import SearchConfig, perturb
from genEval.search.progress import Progress
from genEval.search.sources import first_readable, sample_seed, skips_unreadable, source_ids, source_stream

__all__ = ["EXECUTION_KEYS", "evaluate", "identity_config", "sample_seed", "skips_unreadable"]

log = logging.getLogger(__name__)

#: Settings that change how fast a run goes, never what it finds: they may differ when a run is resumed.
_SPEED = tuple(k for k in EXECUTION_FIELDS if k not in ("precision", "role_precision"))  # precision may flip a tie
EXECUTION_KEYS = (
    *_SPEED,  # as older runs recorded them, at the top level
    *(f"execution.{k}" for k in _SPEED),  # as the execution node records them (conf/execution)
    *(f"{where}{k}" for where in ("", "output.") for k in ("progress", "log_interval", "grid_size")),
    "hydra",
    "shard",
    "assets",  # where asset files were found: their bytes are checked by sha256, so the place changes nothing
    "data.skip_unreadable",
)


def evaluate(
    classifier: Classifier,
    data: ImageDataset,
    generator: Generator,
    oracle: Oracle,
    search: SearchConfig | Mapping | None = None,
    *,
    seed: int | None = None,
    execution: Execution | Mapping | None = None,
    mask: Any = None,
    output: RunOutput | str | Path | None = None,
    scoring: Scoring | Mapping | None = None,
    shard: Shard | None = None,
    reference: str | None = None,
    config: Mapping[str, Any] | None = None,
    ood: ImageDataset | None = None,
) -> EvalResult:
    """Evaluate ``classifier`` on ``data`` by oracle-vetted latent perturbation (paper Algorithm 1).

    ``search``: the search (paper preset when None). ``seed=None`` draws a fresh seed (a dynamic benchmark: new
    samples every run) and records it (a resumed run keeps the seed it started with); the same seed gives identical
    scores however the work is batched or sharded. ``execution``: device, batch size (None: chosen from the memory
    one search step needs), DataLoader workers, precision (fp32 | bf16 | fp16, all or per role), memory_format,
    compile; recorded under ``execution``. ``mask``: None, a 0/1 tensor broadcastable to one latent, a fitted
    StyleMask, or a ``mask`` config (NoMask, SparseMask, AutoMask, FixedMask(tensor, id); paper 3.2.1). ``output``:
    a :class:`~genEval.runs.recording.RunOutput` (the run directory, saved tensors, grid, progress), or a run
    directory. ``scoring``: a :class:`~genEval.scores.run_scores.Scoring` (intervals, bootstrap, warnings).
    ``shard``: evaluate only part of the sources (see :class:`Shard`).
    ``reference``: the class the oracle must keep seeing, the true ``label`` or its own verdict on the clean image
    (``clean_prediction``); None takes the oracle's ``reference`` hook, else ``label``. ``config``: what the run
    records as its configuration (the CLI's resolved config; None: these settings). ``ood``: images of classes
    outside the label set (``ood_data=<folder>``); the classifier's confidence on them is scored against the clean
    images (-MSP AUPR and AUROC in results.json ``confidence.ood``, :mod:`genEval.search.ood`).
    """
    t_start = time.perf_counter()
    output, scoring = RunOutput.coerce(output), Scoring.coerce(scoring)
    search, execution, shard = SearchConfig.coerce(search), Execution.coerce(execution), shard or Shard()
    seed_drawn, seed = seed is None, _run_seed(seed, output.dir)
    dense = _DensePass((classifier, generator, oracle), search, seed, execution, output, scoring, reference)
    mask = mask_config(mask).resolve(generator, data, seed=seed, dense_pass=dense, workdir=output.dir)
    data = _seeded(mask.data, seed)  # data.subset=random: the sources are drawn from the run's seed
    reference = reference or hook(oracle, "reference") or "label"
    positions = _positions(data, shard)
    components = _components(classifier, generator, oracle, data, mask.id)
    run_config = config if config is not None else _own_config(search, scoring, output, reference, execution)
    ids = source_ids(data, positions)  # hashed into the identity; a resume refuses records of other sources
    identity = _identity(run_config, components, seed, data, positions, ids, shard)
    roles = _Roles.prepare(classifier, generator, oracle, data, execution)
    first = data[first_readable(data, positions)]
    roles.check_classifier(first, data)  # before anything is written
    batch = _batch_size(execution, first, roles)
    roles.log_start(seed, positions, shard, search)
    batch_size = batch["batch_size"]
    with Recording.open(
        output, identity, generator=components["generator"], flush_every=batch_size, source_ids=ids
    ) as run:
        todo = run.todo(positions)
        progress = Progress(len(positions), len(positions) - len(todo), shard, output.progress, output.log_interval)
        skipped = _Skipped(skips_unreadable(data), progress)
        samples = source_stream(data, todo, seed, batch_size, execution.num_workers, roles.device, skipped.add)
        loop_s = _search(samples, roles, search, batch_size, mask.tensor, reference, run, progress, first)
        details = dict(kernels=roles.kernels, execution=execution.to_dict(), batch=batch)
        if ood is not None:
            details["ood_data"] = ood_confidence(roles.classifier, ood, roles.device, batch_size)
        result = summarize(
            run.records(),
            list(data.class_names),
            config=RunConfig.of(run_config, search, scoring),
            identity=identity,
            seed_drawn=seed_drawn,
            device=str(roles.device),
            run_dir=run.run_dir,
            timings=_timings(t_start, loop_s, len(todo)),
            details={**details, "image_shapes": run.image_shapes(), "skipped": skipped.listed()},
        )
        run.finish(result)
    for w in result.warnings:
        log.warning(w)
    return result


# ------------------------------------------------------------------------------------------------ settings
def _run_seed(seed: int | None, run_dir: str | Path | None) -> int:
    """The run's seed: the one given, else the one a resumed run drew when it started, else a fresh one."""
    if seed is not None:
        return int(seed)
    if run_dir is not None and (Path(run_dir) / RUN).is_file():
        return read_run_identity(run_dir).seed
    return secrets.randbits(31)


def _seeded(data: ImageDataset, seed: int) -> ImageDataset:
    """``data`` re-drawn with the run's seed when it can be (its ``with_seed`` hook)."""
    with_seed = hook(data, "with_seed")
    return with_seed(seed) if callable(with_seed) else data


def _positions(data: ImageDataset, shard: Shard) -> list[int]:
    if len(data) == 0:
        raise ValueError(
            f"dataset {hook(data, 'name') or data!r} is empty; point data at a folder with images or raise data.limit."
        )
    return shard.positions(len(data))


def _own_config(
    search: SearchConfig, scoring: Scoring, output: RunOutput, reference: str, execution: Execution
) -> dict[str, Any]:
    """What a run called from a notebook records as its configuration (the CLI records its resolved config)."""
    return {
        "search": asdict(search),
        "interval": scoring.interval,
        "n_boot": scoring.n_boot,
        "gap_warn_points": scoring.gap_warn_points,
        "save_latents": output.save_latents,
        "save_images": output.save_images,
        "reference": reference,
        "precision": execution.precision,
        "role_precision": dict(execution.role_precision),
    }


@dataclass(frozen=True)
class _DensePass:
    """``mask=auto``'s fit pass (:class:`~genEval.masks.configs.AutoMask`): the run's roles and settings, so that
    ``pass(data, budget, run_dir)`` searches ``data`` without a mask (``budget``; None: the run's) into ``run_dir``
    with latents saved, under the run's seed."""

    roles: tuple[Classifier, Generator, Oracle]
    search: SearchConfig
    seed: int
    execution: Execution
    output: RunOutput
    scoring: Scoring
    reference: str | None

    def __call__(self, data: ImageDataset, budget: int | None, run_dir: Path) -> EvalResult:
        classifier, generator, oracle = self.roles
        search = self.search if budget is None else replace(self.search, budget=int(budget))
        output = replace(self.output, dir=run_dir, save_latents=True)
        return evaluate(classifier, data, generator, oracle, search, seed=self.seed, execution=self.execution,
                        output=output, scoring=self.scoring, reference=self.reference)  # fmt: skip


# ---------------------------------------------------------------------------------------------- identity
def _components(classifier: Any, generator: Any, oracle: Any, data: Any, mask_id: str) -> dict[str, str]:
    return {
        "classifier": component_id(classifier),
        "generator": component_id(generator),
        "oracle": component_id(oracle),
        "data": component_id(data),
        "mask": mask_id,
    }


def identity_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a run's recorded config that is part of its identity: ``config`` without :data:`EXECUTION_KEYS`."""
    return _without(config, EXECUTION_KEYS)


def _without(config: Mapping, keys: Sequence[str]) -> dict:
    """``config`` without ``keys``; a dotted key (``data.skip_unreadable``) removes a nested entry."""
    out = {k: v for k, v in config.items() if k not in keys}
    for key in keys:
        head, _, rest = key.partition(".")
        if rest and isinstance(out.get(head), dict):
            out[head] = _without(out[head], [rest])
    return out


def _identity(
    config: Mapping,
    components: dict,
    seed: int,
    data: ImageDataset,
    positions: list[int],
    ids: list[str] | None,
    shard: Shard,
) -> RunIdentity:
    """What a run is: config minus execution settings, components, seed, the sources (``ids``: their source ids in
    position order, when the data name them), the shard."""
    how = hook(data, "subset_info")  # how the sources were chosen (random subset: its seed)
    sources = RunSources(
        data=component_id(data),
        n_total=len(data),
        n=len(positions),
        selection=how() if callable(how) else None,
        sha256=None if ids is None else hashlib.sha256("\n".join(ids).encode()).hexdigest(),
    )
    return RunIdentity(identity_config(config), components, seed, sources, shard)


# ------------------------------------------------------------------------------------------------- roles
@dataclass(frozen=True)
class _Roles:
    """The three roles as the loop runs them (on the device, in eval mode, at their precision) and the execution
    settings that took effect (``kernels``)."""

    classifier: Any
    generator: Any
    oracle: Any
    device: torch.device
    kernels: dict[str, Any]

    @classmethod
    def prepare(cls, classifier: Any, generator: Any, oracle: Any, data: ImageDataset, execution: Execution) -> _Roles:
        device = execution.torch_device()
        for m in (classifier, generator, oracle):
            if isinstance(m, torch.nn.Module):
                m.to(device).eval().requires_grad_(False)
        oracle.prepare(list(data.class_names))  # in the oracle's own precision (a CLIP head is encoded once, cached)
        classifier, generator, oracle, kernels = accelerate(classifier, generator, oracle, execution, device)
        return cls(classifier, generator, oracle, device, kernels)

    def check_classifier(self, first: tuple, data: ImageDataset) -> None:
        """The classifier gives one logit per class of the data (checked on the first source)."""
        with torch.no_grad():
            out_dim = self.classifier(first[0][None].to(self.device)).shape[-1]
        n = len(data.class_names)
        if out_dim != n:
            fix = (  # no class list or head size makes a 10-way model read ImageNet: it takes an ImageNet classifier
                "Test an ImageNet classifier, e.g. classifier=resnet50_imagenet or classifier=timm "
                "classifier.name=resnet50.a1_in1k"
                if n == 1000
                else "Set classifier.num_classes or data.class_names to match"
            )
            raise ValueError(
                f"classifier returned {out_dim} logits but the dataset has {n} classes ({component_id(data)}). {fix}."
            )

    def log_start(self, seed: int, positions: list[int], shard: Shard, search: SearchConfig) -> None:
        """One short line at INFO (seed, device, images, the search's step rule: Eq. 2's budget and step size; the
        components by id), their settings in full at DEBUG (no repr dumps in the log a user reads)."""
        roles = (self.classifier, self.generator, self.oracle)
        log.info(
            "genEval seed=%d device=%s: %d images (%s), %d steps of %g (%s); classifier %s, generator %s, oracle %s",
            seed,
            self.device,
            len(positions),
            shard.name,
            search.budget,
            search.step_size,
            search.update,
            *(component_id(m) for m in roles),
        )
        log.debug("search=%s\n classifier: %s\n generator: %s\n oracle: %s", search, *(_describe(m) for m in roles))

    @contextlib.contextmanager
    def memory_guard(self, batch_size: int, first: tuple) -> Iterator[None]:
        """An out-of-memory error inside becomes one that names a batch size that fits."""
        try:
            yield
        except (RuntimeError, MemoryError) as err:
            if is_out_of_memory(err):
                raise too_large(
                    batch_size, first[0], first[1], self.classifier, self.generator, self.device, err
                ) from err
            raise


def _describe(obj: Any) -> str:
    """One line for the log: the component's settings, not its whole module tree."""
    if isinstance(obj, torch.nn.Module):
        return f"{type(obj).__name__}({obj.extra_repr()}) [{component_id(obj)}]"
    return repr(obj)


def _batch_size(execution: Execution, first: tuple, roles: _Roles) -> dict[str, Any]:
    """The batch size (the one set, else chosen from the memory one search step needs) and how it was chosen."""
    if execution.batch_size is not None:
        return {"batch_size": execution.batch_size, "auto": None}
    auto = auto_batch_size(first[0], first[1], roles.classifier, roles.generator, roles.device)
    return {"batch_size": auto.batch_size, "auto": auto.to_dict()}


# -------------------------------------------------------------------------------------------- the search
class _Skipped:
    """Sources that cannot be decoded: the run stops at the first (``skip`` False), or logs and lists each."""

    def __init__(self, skip: bool, progress: Progress) -> None:
        self.skip, self.progress, self.found = skip, progress, []

    def add(self, position: int, err: UnreadableSource) -> None:
        if not self.skip:
            raise err
        log.warning("skipped unreadable source %s: %s", err.source_id, err.reason)
        self.found.append({"position": position, "source_id": err.source_id, "path": err.path, "reason": err.reason})
        self.progress.skip()

    def listed(self) -> list[dict] | None:
        """The skipped sources in data-set order (None when the data do not skip: results then list none)."""
        return sorted(self.found, key=lambda d: d["position"]) if self.skip else None


def _search(
    samples: Iterator,
    roles: _Roles,
    search: SearchConfig,
    batch_size: int,
    mask: torch.Tensor | None,
    reference: str,
    run: Recording,
    progress: Progress,
    first: tuple,
) -> float:
    """The loop over ``samples`` (:func:`~genEval.search.perturb.perturb`); every finished sample goes to the run's
    recording and to the progress. Returns the loop's seconds."""
    kernels = roles.kernels
    compiled = {"mode": kernels["compile_mode"], "scope": kernels["compile_scope"]} if kernels["compile"] else False
    t0 = time.perf_counter()
    with roles.memory_guard(batch_size, first):
        for out in perturb(samples, roles.classifier, roles.generator, roles.oracle, search, batch_size=batch_size,
                           mask=mask, device=roles.device, reference=reference, compile=compiled):  # fmt: skip
            run.add(out)
            progress.update(out)
    if roles.device.type == "cuda":
        torch.cuda.synchronize(roles.device)
    progress.close()
    return time.perf_counter() - t0


def _timings(t_start: float, loop_s: float, computed: int) -> dict[str, float]:
    return {
        "total_s": time.perf_counter() - t_start,
        "loop_s": loop_s,
        "per_sample_s": loop_s / max(1, computed),
        "samples_computed": computed,
    }
