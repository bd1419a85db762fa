"""``geneval --help`` and ``geneval <command> --help``, written from the command table and the config files, so the
text cannot drift from them:

* ``geneval --help``: every command with its one-line summary (:data:`genEval.commands.registry.COMMANDS`), the
  overrides users type most (:data:`COMMON_OVERRIDES`) and the config groups with their options (``conf/<group>/``);
* ``geneval <command> --help``: the command's summary, the groups it composes with their options, and its keys:
  ``conf/<config>.yaml`` as written, comments included (without its ``hydra:`` block).

The command line prints it before Hydra or any command module is imported (docs/getting-started.md): it reads YAML
files, nothing more, and answers at once. (``--hydra-help`` still shows Hydra's own.)
"""

from __future__ import annotations

import re

import yaml

from genEval.commands.registry import COMMANDS, CONF_DIR, SUMMARIES, config_options, group_names

#: The overrides users type most, each with what it does (``geneval --help`` lists them; a test composes each).
COMMON_OVERRIDES: tuple[tuple[str, str], ...] = (
    ("data=cifar10_jpg", "the data preset; it brings the classifier, oracle and generator that fit it"),
    ("data.limit=100", "a seeded, class-balanced subset of N source images"),
    ("seed=0", "repeat a run exactly (default: a fresh seed every run, recorded)"),
    ("search.budget=50 search.step_size=0.001", "steps per image and their size (the paper's preset)"),
    ("classifier=timm classifier.name=resnet50", "the tested classifier"),
    ("oracle=clip_vit_b32", "the judge that vetoes steps (the paper's CLIP ViT-B/32)"),
    ("generator=taef2", "the latent space searched"),
    ("experiment=cifar10_taef2", "a preset over every role"),
    ("device=cuda batch_size=64 precision=bf16", "the execution settings (execution=gpu: CUDA, bf16, compile)"),
    ("save_images=true save_latents=true", "keep the images (export, audit) and latents (fit-mask)"),
    ("hydra.run.dir=runs/a", "the run directory; rerunning the same command resumes it"),
    ("tracking=mlflow", "log the run to MLflow"),
)
MAIN = "evaluate"  # the main job: `geneval [overrides]`


def _groups(config: str) -> list[str]:
    """The config groups ``conf/<config>.yaml`` composes (its defaults list), in order."""
    defaults = yaml.safe_load((CONF_DIR / f"{config}.yaml").read_text()).get("defaults") or []
    found = []
    for entry in defaults:
        if isinstance(entry, dict):
            for key in entry:
                group = re.sub(r"^(override|optional)\s+", "", str(key)).lstrip("/")
                if (CONF_DIR / group).is_dir() and group not in found:
                    found.append(group)
    return found


def _keys(config: str) -> str:
    """``conf/<config>.yaml`` as written, comments included, without its ``hydra:`` block (Hydra's own settings)."""
    lines, inside = [], False
    for line in (CONF_DIR / f"{config}.yaml").read_text().splitlines():
        if re.match(r"^\S", line):
            inside = line.startswith("hydra:")
        if not inside:
            lines.append(line)
    return "\n".join(lines).strip()


def config_groups() -> list[str]:
    """``group: option, option, ...`` for every config group of the package (``hydra/`` aside), as Hydra lists them."""
    groups = group_names()
    return [f"{g}: {', '.join(config_options(g))}" for g in groups if config_options(g)]


def main_help() -> str:
    """``geneval --help``."""
    width = max(len(name) for name in SUMMARIES)
    commands = [f"  {'(none)':<{width}}  {SUMMARIES['evaluate']}"]
    commands += [f"  {name:<{width}}  {SUMMARIES[name]}" for name in SUMMARIES if name != "evaluate"]
    most = max(len(o) for o, _ in COMMON_OVERRIDES)
    overrides = [f"  {o:<{most}}  {what}" for o, what in COMMON_OVERRIDES]
    return "\n".join(
        [
            "geneval: stress-test an image classifier with freshly generated, oracle-vetted test images",
            "(SA, PA, VR and FMR = 100*PA/SA, each with a 95% interval).",
            "",
            "Usage: geneval [command] [key=value ...]     (Hydra overrides; -m sweeps them)",
            "       geneval <command> --help              (a command's purpose and keys)",
            "",
            "== Commands ==",
            *commands,
            "",
            "== Most used overrides ==",
            *overrides,
            "",
            "== Config groups == (group=option; conf/<group>/<option>.yaml)",
            *config_groups(),
            "",
            "`geneval list classifiers` (generators, oracles, benchmarks, presets) names each with one line;",
            "`geneval --cfg job` prints every key of the composed configuration.",
        ]
    )


def command_help(name: str) -> str:
    """``geneval <command> --help``."""
    config = COMMANDS[name].config
    path = COMMANDS[name].path
    usage = f"geneval {name}" + (f" [{path}]" if path else "") + " [key=value ...]"
    groups = [f"  {g}: {', '.join(config_options(g))}" for g in _groups(config)]
    return "\n".join(
        [
            f"geneval {name}: {SUMMARIES[name]}",
            "",
            f"Usage: {usage}" + (f"     (a first argument without '=' sets {path})" if path else ""),
            *(["", "== Config groups it composes == (group=option)", *groups] if groups else []),
            "",
            f"== Keys (conf/{config}.yaml) ==",
            _keys(config),
            *_short_names(config),
        ]
    )


def _short_names(config: str) -> list[str]:
    """The short names at the top level of ``conf/<config>.yaml`` that the settings bundles it composes interpolate
    (``conf/_shortcuts/<bundle>.yaml`` as written: ``device=``, ``n_boot=``, ``stop=``; docs/configuration.md)."""
    found = [g for g in _groups(config) if (CONF_DIR / "_shortcuts" / f"{g}.yaml").is_file()]
    return [
        line
        for g in found
        for line in (
            "",
            f"== Short names of {g} (conf/_shortcuts/{g}.yaml; or {g}.<key>=) ==",
            _keys(f"_shortcuts/{g}"),
        )
    ]


def help_text(name: str) -> str:
    """The help of command ``name``: the main help for the main job, else the command's."""
    return main_help() if name == MAIN else command_help(name)
