"""``geneval [overrides]``: the main job (conf/config.yaml). Checks, builds the roles, evaluates, writes report.html,
prints the headline and the table of scores.

Before anything is built (:func:`check_evaluate`, which the command line also runs before Hydra makes the run
directory): the main job's own settings and the execution settings (:mod:`genEval.commands.early`), every
component's keys and types, the pieces against each other (classes, image sizes, latents, weights:
:func:`genEval.commands.checks.check_run`), the shard, and whether the device asked for is there (``device=cuda``
without a GPU is refused in a second, not after the models were built).

Sharding (``shard.index=I shard.count=N``): when not given, the shard is taken from the launcher's
environment (``RANK``/``WORLD_SIZE`` under torchrun, ``SLURM_PROCID``/``SLURM_NTASKS`` under Slurm), and the
CUDA device from ``LOCAL_RANK`` (``SLURM_LOCALID``) when ``device=auto``. A sharded run writes its own run
directory ``<run dir>/shard-I-of-N``, so shards that share a Hydra run directory never share files;
``geneval merge`` combines them.

What it prints (docs/scores.md): one headline (the ranking score of ``geneval compare``, FMR_v, with its interval
and counts; :func:`genEval.scores.text.headline`), the aligned table of scores, the roles as the command line named
them, warnings, where the files went and the commands to run next.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from genEval.commands import (
    build,
    build_data,
    bundle,
    command,
    execution_bundle,
    hydra_output_dir,
)
from genEval.commands.checks import check_run, choice, classifiers_for
from genEval.commands.early import RUN_SETTINGS
from genEval.commands.settings import check_node, check_settings
from genEval.commands.tracking import run_config, tracked
from genEval.comparisons.ranking import DEFAULT_RANK_BY
from genEval.reports.report import write_report
from genEval.runs.identity import Shard
from genEval.runs.results import EvalResult, image_size_line
from genEval.scores.text import headline, score_table
from genEval.search.driver import evaluate
from genEval.search.execution import Execution, resolve_device

#: The main job's own settings (conf/config.yaml), checked before anything is built.
SETTINGS = RUN_SETTINGS

#: The component groups the main job builds.
ROLES_BUILT = ("mask", "classifier", "data", "generator", "oracle")
#: The roles a summary names, as the command line chose them.
ROLES_SHOWN = ("classifier", "data", "generator", "oracle")

#: (index variable, count variable, local-rank variable) of the launchers genEval understands.
LAUNCHER_ENV = (("RANK", "WORLD_SIZE", "LOCAL_RANK"), ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


def shard_from(cfg: DictConfig, environ: dict[str, str] | None = None) -> tuple[Shard, int | None]:
    """The shard (config first, then the launcher's environment) and the local rank, if a launcher set one."""
    env = os.environ if environ is None else environ
    index, count = cfg.get("shard", {}).get("index"), cfg.get("shard", {}).get("count")
    local = None
    for idx_var, cnt_var, local_var in LAUNCHER_ENV:
        if idx_var in env and cnt_var in env:
            if index is None and count is None:
                index, count = int(env[idx_var]), int(env[cnt_var])
            local = int(env[local_var]) if local_var in env else None
            break
    if index is not None and count is not None and not int(index) < int(count):
        raise ValueError(
            f"shard.index must lie in 0..shard.count-1, got shard.index={index} with shard.count={count}; "
            f"e.g. shard.index=0 shard.count={count}."
        )
    if (index is None) != (count is None):
        raise ValueError(
            f"give both shard.index and shard.count (got index={index}, count={count}), "
            "e.g. shard.index=0 shard.count=4."
        )
    return Shard(int(index or 0), int(count or 1)), local


def ood_data_for(root: str | None, data: Any) -> Any:
    """The images of ``ood_data=<folder>`` (sub-folders are read as classes, none of them the data's), at the size and
    channels of the run's data (the first source's), or None when not given."""
    if root is None:
        return None
    x = data[0][0]
    node = {"_target_": "genEval.data.ImageFolderData", "root": root, "image_size": int(x.shape[-1]),
            "channels": int(x.shape[0]), "name": f"ood:{Path(root).name}"}  # fmt: skip
    return build(OmegaConf.create(node), "ood_data")  # the one image-folder reader (genEval/data/folders.py)


def device_for(device: str, local_rank: int | None) -> str:
    """``device=auto`` under a launcher picks ``cuda:<local rank>`` when CUDA is there."""
    if device == "auto" and local_rank is not None and torch.cuda.is_available():
        return f"cuda:{local_rank % torch.cuda.device_count()}"
    return device


@dataclass(frozen=True)
class Checked:
    """What :func:`check_evaluate` found: the execution settings (device resolved for a launcher's local rank) and
    the shard."""

    execution: Execution
    shard: Shard


def check_evaluate(cfg: DictConfig) -> Checked:
    """Every check of the main job that needs no built component (module docstring), in the order of their cost."""
    check_settings(cfg, SETTINGS)
    execution = execution_bundle(cfg)  # device, batch size, precision, compile...: checked once, here
    for key in ("search", "scoring", "output"):  # the bundles check themselves
        bundle(cfg, key)
    for role in ROLES_BUILT:  # every component's keys and types, before the first (maybe slow) one is built
        check_node(cfg[role], role)
    # the pieces against each other (classes, images, latents, assets, weights), still before anything is built
    check_run(cfg, classifiers={"classifier": cfg.classifier}, generators={"generator": cfg.generator})
    shard, local_rank = shard_from(cfg)
    execution = replace(execution, device=device_for(execution.device, local_rank))
    if execution.device != "auto":
        resolve_device(execution.device)  # device=cuda on a machine without one: refused now, not after the build
    return Checked(execution, shard)


def roles_named(cfg: DictConfig) -> dict[str, str]:
    """Role -> the preset the command line chose (``digits_intervention``), else the target's name."""
    return {role: choice(cfg, role) for role in ROLES_SHOWN}


def summary_lines(
    result: EvalResult, roles: dict[str, str] | None = None, report: Path | None = None, cfg: DictConfig | None = None
) -> list[str]:
    """What the main job (and ``geneval merge``) prints at its end (module docstring); ``roles``: role -> name as
    the user chose it (None: the components' ids); ``cfg``: the run's config, for the commands to run next."""
    roles = roles or {r: str(result.components.get(r, r)) for r in ROLES_SHOWN}
    scores = result.scores.to_dict()
    shard = result.shard
    seed = f"seed {result.seed}" + (f" (drawn; seed={result.seed} repeats the run)" if result.seed_drawn else "")
    lines = [
        f"{roles['classifier']} on {roles['data']}: {headline(scores, DEFAULT_RANK_BY)}",
        *score_table(scores),
        f"  generator {roles['generator']}, oracle {roles['oracle']}; {seed}"
        + (f"; shard {shard.index} of {shard.count}" if shard.count > 1 else "")
        + (f"; {result.timings['total_s']:.1f} s" if "total_s" in result.timings else ""),
        *image_size_line(result.image_shapes, resized_only=True),  # the generator resized the images
    ]
    fmr = scores.get("fmr", {}).get("value")
    if fmr is not None and fmr > 100:
        lines.append(
            "  note: FMR > 100 is possible: PA is measured over the validated samples only (the images the oracle "
            "vouched for, often the easier ones) while SA is over all samples; FMR_v compares the same population."
        )
    covered = sorted({int(s.label) for s in result.samples})
    if 0 < len(covered) < len(result.class_names):
        names = ", ".join(result.class_names[c] for c in covered)
        lines.append(
            f"  note: the data cover {len(covered)} of the classifier's {len(result.class_names)} classes ({names}); "
            "the scores are about these classes only."
        )
    lines += [f"  warning: {w}" for w in result.warnings]
    if result.run_dir:
        lines += _where_and_next(Path(result.run_dir), roles, report, cfg)
    return lines


def shown(path: Path | str) -> str:
    """``path`` as the user would type it: relative to the working folder when it lies inside it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _where_and_next(run: Path, roles: dict[str, str], report: Path | None, cfg: DictConfig | None) -> list[str]:
    """Where the files went, and the commands to run next: the report, the export, a comparison."""
    run, report = Path(shown(run)), None if report is None else shown(report)
    files = sorted(p.name for p in run.iterdir() if p.is_file() and not p.name.startswith("."))
    lines = [f"files: {run}/  ({', '.join(files)})", "next:"]
    lines.append(f"  open {report}" if report is not None else f"  geneval report {run}   (report.html)")
    if (run / "images").is_dir():
        lines.append(f"  geneval export {run}   (the validated images as a snapshot)")
    else:
        lines.append("  add save_images=true to keep the images, then geneval export <run dir>   (a snapshot)")
    others = [c for c in classifiers_for(cfg) if c != roles["classifier"]] if cfg is not None else []
    if others:
        lines.append(
            f"  geneval compare 'classifiers=[{roles['classifier']},{others[0]}]' data={roles['data']}"
            "   (rank it against another model)"
        )
    return lines


@command("evaluate", check=check_evaluate)
def run_evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Check (:func:`check_evaluate`), build classifier, data (folders mapped onto the classifier's classes),
    generator, oracle and mask from their groups, run ``genEval.evaluate``, write report.html (``report=false``: not)
    and print the summary."""
    checked = check_evaluate(cfg)
    shard, execution = checked.shard, checked.execution
    search = bundle(cfg, "search")
    roles = roles_named(cfg)
    name = f"{roles['classifier']} on {roles['data']}" + (f" {shard.name}" if shard.count > 1 else "")
    with tracked(cfg, name, "geneval") as track:  # tracking=mlflow: reached before anything is built
        mask = build(cfg.mask, "mask")
        classifier = build(cfg.classifier, "classifier")
        data = build_data(cfg.data, classifier)
        generator = build(cfg.generator, "generator")
        oracle = build(cfg.oracle, "oracle")
        ood = ood_data_for(cfg.get("ood_data"), data)
        run_dir = hydra_output_dir()
        if run_dir is not None and shard.count > 1:
            run_dir = Path(run_dir) / shard.name
        result = evaluate(
            classifier=classifier,
            data=data,
            generator=generator,
            oracle=oracle,
            search=search,
            mask=mask,
            seed=cfg.seed,
            execution=execution,
            output=bundle(cfg, "output", dir=run_dir),
            scoring=bundle(cfg, "scoring"),
            shard=shard,
            config=run_config(cfg),
            ood=ood,
        )
        report = write_report(result.run_dir) if result.run_dir and cfg.get("report", True) else None
        track.results(result.to_dict(), result.run_dir)
    print("\n".join(summary_lines(result, roles, report, cfg)))
    return result.metrics
