"""Every ``conf/**.yaml`` composes and instantiates (issue 13: configs mirror code).

The options of the plug-in groups (generator, oracle, classifier) are built and checked by the conformance suite,
``tests/contracts``. The other groups' options are built here from the same catalogue (``tests/support/options.py``):
those whose real data cannot exist offline with small stand-ins (``tests/support/stand_ins.py``: idx files, a fake
CIFAR-10 batch, image folders, a style mask); everything else as configured. A new option in a group must be listed
in the catalogue (with no overrides when it needs none), so an option that does not instantiate cannot slip in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from genEval.commands import CONF_DIR, build, config_options
from genEval.interfaces import ImageDataset
from genEval.search.perturb import SearchConfig
from tests.support.assets import ASSETS
from tests.support.options import OPTIONS, OTHER_GROUPS, options
from tests.support.stand_ins import DATA_BUILDERS, write_stand_ins


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[str, str]:
    return write_stand_ins(tmp_path_factory.mktemp("stand-ins"), DATA_BUILDERS)


def test_every_option_is_catalogued():
    for group in OTHER_GROUPS:
        listed = sorted(o.name for o in OPTIONS if o.group == group)
        assert listed == config_options(group), f"conf/{group}: list every option in tests/support/options.py"


def _compose(config: str, overrides: list[str]):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config, overrides=overrides)


def _build_role(group: str, node):
    if group == "search":
        return SearchConfig.coerce(OmegaConf.to_container(node, resolve=True))
    return build(node, group)


@pytest.mark.parametrize("option", options(*OTHER_GROUPS))
def test_every_option_composes_and_instantiates(option, stand_ins, monkeypatch):
    group, name = option.group, option.name
    if option.assets and not ASSETS.exists():
        pytest.skip(f"conf/{group}/{name}.yaml reads ../shared/assets, which is absent")
    if (group, name) == ("data", "cifar10"):  # the fake batch cannot match torchvision's md5 of the real one
        import torchvision

        monkeypatch.setattr(torchvision.datasets.CIFAR10, "_check_integrity", lambda self: True)
        monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    cfg = _compose(option.composed_in, option.command_line(stand_ins))
    obj = _build_role(group, cfg[group])
    if group == "data":
        assert isinstance(obj, ImageDataset), f"{group}={name} built {type(obj).__name__}"
    if group == "protocol":
        assert callable(obj.wrap) and len(obj.indices) == 200, f"{group}={name} built {obj!r}"


def test_experiment_presets_compose_and_instantiate_every_role():
    if not ASSETS.exists():
        pytest.skip("the experiment presets read ../shared/assets, which is absent")
    for name in config_options("experiment"):
        cfg = _compose("config", [f"experiment={name}"])
        for group in ("data", "classifier", "generator", "oracle", "mask", "search"):
            _build_role(group, cfg[group])


@pytest.mark.parametrize("config", sorted(p.stem for p in CONF_DIR.glob("*.yaml")))
def test_every_command_config_composes_and_its_role_nodes_instantiate(config):
    cfg = _compose(config, [])
    for group in ("data", "generator", "oracle", "mask", "search"):
        if group in cfg and cfg[group] is not None and (group == "search" or "_target_" in cfg[group]):
            if group == "data" and not ASSETS.exists() and "asset:" in str(OmegaConf.to_yaml(cfg[group])):
                continue
            _build_role(group, cfg[group])


# ------------------------------------------------------------------------ the settings bundles (issue 45, item 1)
BUNDLE_CONFIGS = ("config", "compare", "score", "transfer", "worker", "serve")  # every command composing a bundle
BUNDLE_NODES = ("search", "server", "worker")  # the nodes with a _target_ besides the run's bundles


@pytest.mark.parametrize("config", BUNDLE_CONFIGS)
def test_every_bundle_default_in_yaml_equals_its_dataclass_default(config):
    """Defaults live in the dataclass: every bundle node a command composes, built with no override, is its
    dataclass's default, and every key of the node and every short spelling it interpolates holds that field's
    default (compare keeps its images: save_images=true, its one stated difference)."""
    from hydra.utils import get_class

    from genEval.commands import bundle
    from genEval.commands.bundles import RUN_BUNDLES, shortcuts, spelled

    cfg = _compose(config, [])
    composed = [b for b in (*BUNDLE_NODES, *RUN_BUNDLES, "comparison") if b in cfg]
    assert composed, f"{config} composes no bundle"
    for key in composed:
        cls = get_class(cfg[key]._target_)
        own = {"save_images": True} if config == "compare" and key == "output" else {}
        if key == "server":  # serve's leaderboard at / is digits' (Settings: the first offered); home is passed
            own = {"default_benchmark": "digits"}
        given = {"home": Path("/srv/geneval")} if key == "server" else {}
        default = cls(**own, **given)
        assert bundle(cfg, key, **given) == default, f"{config}.yaml: {key} differs from {cls.__name__}()"
        names = spelled(cfg, key)
        for path, spelling in names.items():  # sequential.stop -> stop, er_scale -> er.scale, n_boot -> n_boot
            value = default
            for part in path.split("."):
                value = getattr(value, part, None) if part != "role_precision" else {}
            if path.startswith("role_precision"):
                continue  # {classifier: null, ...} is Execution's {} (null follows precision)
            assert OmegaConf.select(cfg, spelling) == value, f"{config}.yaml: {spelling} != {cls.__name__}.{path}"
        interpolated = set(names.values())
        assert set(shortcuts(key)) <= interpolated, f"{key} must interpolate its short names"


def test_the_short_names_and_the_node_spelling_reach_the_same_setting():
    """``geneval device=cuda batch_size=64 precision=bf16`` and ``geneval execution.device=cuda`` (the issue's
    Interface lines) set the same Execution fields; a run records each setting once, in its node."""
    from genEval.commands import bundle
    from genEval.commands.tracking import run_config

    short = _compose("config", ["device=cpu", "batch_size=64", "precision=bf16", "n_boot=20", "save_images=true"])
    node = _compose(
        "config",
        ["execution.device=cpu", "execution.batch_size=64", "execution.precision=bf16", "scoring.n_boot=20",
         "output.save_images=true"],
    )  # fmt: skip
    for key in ("execution", "scoring", "output"):
        assert bundle(short, key) == bundle(node, key), key
    assert bundle(short, "execution").batch_size == 64 and bundle(short, "execution").precision == "bf16"
    recorded = run_config(short)
    assert recorded == run_config(node)
    assert recorded["execution"]["device"] == "cpu" and recorded["scoring"]["n_boot"] == 20
    assert not {"device", "batch_size", "precision", "n_boot", "save_images"} & set(recorded)  # once, in its node
    assert "_target_" not in recorded["execution"]  # a bundle is recorded by its to_dict(), no import path


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["device=cpu", "execution.device=cuda"], "device=cpu and execution.device=cuda both set the execution"),
        (["execution=gpu", "device=cpu"], "device=cpu and execution.device=cuda both set the execution setting"),
        (["n_boot=5", "scoring.n_boot=7"], "n_boot=5 and scoring.n_boot=7 both set the scoring setting 'n_boot'"),
        (["save_images=true", "output.save_images=false"], "save_images=true and output.save_images=false both"),
    ],
)
def test_a_short_name_and_its_node_key_set_to_different_values_are_refused_naming_both(overrides, message):
    from genEval.commands import bundle

    cfg = _compose("config", overrides)
    key = {"d": "execution", "e": "execution", "n": "scoring", "s": "output"}[overrides[0][0]]
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        bundle(cfg, key)


def test_the_stop_rule_is_one_nested_node_with_its_short_names():
    """``geneval compare stop=settled round_sources=200 max_sources=5000 margin=1`` (issue 33's Interface) and the
    node's spelling ``comparison.sequential.*`` build the same StopRule inside the ComparisonSettings."""
    from genEval.commands import bundle
    from genEval.comparisons.settings import ComparisonSettings, StopRule

    short = ["stop=settled", "round_sources=200", "max_sources=5000", "margin=1", "er.scale=probit", "n_boot=9"]
    node = [f"comparison.sequential.{o}" for o in short[:4]] + ["comparison.er_scale=probit", "scoring.n_boot=9"]
    built = bundle(_compose("compare", short), "comparison")
    assert built == ComparisonSettings(
        n_boot=9, er_scale="probit", sequential=StopRule(stop="settled", round_sources=200, max_sources=5000, margin=1)
    )
    assert bundle(_compose("compare", node[:5] + ["n_boot=9"]), "comparison") == built
    with pytest.raises(ValueError, match=r"^stop must be fixed \| settled, got 'maybe'; e\.g\. stop=settled"):
        bundle(_compose("compare", ["stop=maybe"]), "comparison")
    with pytest.raises(ValueError, match=r"^comparison\.sequential\.stop must be fixed \| settled, got 'maybe'"):
        bundle(_compose("compare", ["comparison.sequential.stop=maybe"]), "comparison")
    with pytest.raises(ValueError, match=r"^stop=settled and comparison\.sequential\.stop=fixed both set"):
        bundle(_compose("compare", ["stop=settled", "comparison.sequential.stop=fixed"]), "comparison")


def test_the_node_spelling_alone_or_agreeing_with_the_short_name_is_taken():
    from genEval.commands import bundle

    assert bundle(_compose("config", ["execution=gpu", "execution.device=cpu"]), "execution").device == "cpu"
    assert bundle(_compose("config", ["execution=gpu"]), "execution").precision == "bf16"
    assert bundle(_compose("config", ["device=cpu", "execution.device=cpu"]), "execution").device == "cpu"
    assert bundle(_compose("config", ["device=auto", "execution.device=cpu"]), "execution").device == "cpu"


def test_a_bundle_key_its_dataclass_does_not_take_is_refused_naming_it():
    from genEval.commands import bundle

    with pytest.raises(ValueError, match=r"^scoring\.n_bot is not a setting of genEval\.scores\.scoring\.Scoring"):
        bundle(_compose("config", ["+scoring.n_bot=5"]), "scoring")


@pytest.mark.parametrize(
    "key, value, node",
    [
        ("compile_mode", "reduce-overhead", "execution"),  # issue 34's Interface: geneval ... compile_mode=...
        ("num_workers", 2, "execution"),
        ("tf32", False, "execution"),
        ("grid_size", 4, "output"),
        ("log_interval", 5, "output"),
        ("gap_warn_points", 5.0, "scoring"),
        ("oracle_warn_accuracy", 50, "scoring"),
    ],
)
def test_every_key_that_was_top_level_before_the_nodes_keeps_its_short_spelling(key, value, node):
    """Before the bundles were nodes every key of conf/{execution,output,scoring} sat at the top level, and earlier
    issues' commands type them so: the short spelling and the node's reach the same field."""
    from genEval.commands import bundle

    short = bundle(_compose("config", [f"{key}={value}"]), node)
    assert getattr(short, key) == value
    assert short == bundle(_compose("config", [f"{node}.{key}={value}"]), node)


def test_the_search_node_builds_its_searchconfig_and_a_run_records_its_keys_without_the_target():
    """``conf/search`` is a node with ``_target_`` (issue 45, item 1): ``search.budget=10`` builds the SearchConfig
    the loop gets, a bad value is named as ``search.budget``, and a run records the search's keys as before (its
    identity holds them: a run from before the node still resumes), without the import path."""
    from genEval.commands import bundle
    from genEval.commands.tracking import run_config
    from genEval.runs.settings import SearchConfig

    cfg = _compose("config", ["search.budget=10", "search.update=sign"])
    assert bundle(cfg, "search") == SearchConfig(budget=10, update="sign")
    recorded = run_config(cfg)["search"]
    assert recorded == {"budget": 10, "step_size": 0.001, "update": "sign", "start_noise": 1.0, "early_stop": False,
                        "fgsm_start": 0.0}  # fmt: skip
    assert SearchConfig.coerce(OmegaConf.to_container(cfg.search)) == SearchConfig(budget=10, update="sign")
    with pytest.raises(ValueError, match=r"^search\.budget must be a whole number >= 0, got 'abc'"):
        bundle(_compose("config", ["search.budget=abc"]), "search")
    with pytest.raises(ValueError, match=r"unknown search setting\(s\) \['_target_'\]"):
        SearchConfig.coerce({"_target_": "genEval.runs.settings.RunOutput", "budget": 3})


# ----------------------------------------------------------- the service's nodes: conf/server and conf/worker
def _worker(cfg, **given):
    from genEval.commands import bundle

    return bundle(cfg, "worker", **given)


def test_the_service_settings_are_nodes_spelled_as_users_type_them():
    """``geneval serve workers=0 db=... home=... max_checks=2 isolation=none`` and ``geneval worker db=... home=...
    device=cpu exit_when_idle=true max_jobs=1`` (docs/service.md) reach conf/server's Settings and conf/worker's
    WorkerSettings; the node spelling (``server.max_checks=3``, ``worker.lease_s=30``) does too; one ``isolation=``
    reaches both the uploads' sandbox and the workers'."""
    from genEval.commands import bundle
    from genEval.service.worker_settings import WorkerSettings

    home = Path("/srv/geneval")
    serve = _compose("serve", ["workers=0", "db=sqlite:////tmp/x.db", "home=/srv/geneval", "max_checks=2",
                               "isolation=none", "max_job_s=600", "n_boot=50"])  # fmt: skip
    settings = bundle(serve, "server", home=home)
    assert (settings.max_checks, settings.isolation, settings.n_boot, settings.home) == (2, "none", 50, home)
    assert _worker(serve) == WorkerSettings(isolation="none", max_job_s=600, n_boot=50)
    assert bundle(_compose("serve", ["server.max_checks=3"]), "server", home=home).max_checks == 3
    assert bundle(_compose("serve", ["max_upload_mb=0.5"]), "server", home=home).max_upload_bytes == 512 * 1024
    worker = _compose("worker", ["exit_when_idle=true", "max_jobs=1", "lease_s=120"])
    assert _worker(worker, device="cpu", host="node-a") == WorkerSettings(
        device="cpu", host="node-a", exit_when_idle=True, max_jobs=1, lease_s=120
    )
    assert _worker(_compose("worker", ["worker.lease_s=30", "worker_retention_s=5"])).lease_s == 30
    assert _worker(_compose("worker", ["worker_retention_s=5"])).retention_s == 5


@pytest.mark.parametrize(
    "config, overrides, message",
    [
        ("worker", ["lease_s=10", "worker.lease_s=30"], "lease_s=10 and worker.lease_s=30 both set the worker setting"),
        ("worker", ["worker_retention_s=5", "worker.retention_s=7"], "worker_retention_s=5 and worker.retention_s=7"),
        ("serve", ["max_checks=4", "server.max_checks=3"], "max_checks=4 and server.max_checks=3 both set the server"),
    ],
)
def test_a_service_short_name_and_its_node_key_set_to_different_values_are_refused(config, overrides, message):
    from genEval.commands import bundle

    node = overrides[1].split(".")[0]
    with pytest.raises(ValueError, match=message):
        bundle(_compose(config, overrides), node, **({"home": Path("/h")} if node == "server" else {}))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["heartbeat_s=90"], r"^heartbeat_s must be below lease_s \(60\), got 90\.0; e\.g\. heartbeat_s=5 \(or jobs"),
        (["worker.max_attempts=0"], r"^worker\.max_attempts must be a whole number >= 1, got 0; e\.g\. worker\.max"),
        (["isolation=sandbox"], r"^isolation must be auto \| bwrap \| none, got 'sandbox'; e\.g\. isolation=auto"),
        (["max_jobs=0"], r"^max_jobs must be a whole number >= 1, got 0; e\.g\. max_jobs=1 \(null: no limit\)"),
        (["cancel_grace_s=-1"], r"^cancel_grace_s must be a number of seconds >= 0, got -1"),
        (["exit_when_idle=maybe"], r"^exit_when_idle must be true or false, got 'maybe'"),
    ],
)
def test_a_bad_worker_setting_is_refused_naming_the_key_as_spelled_and_a_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        _worker(_compose("worker", overrides))


def test_a_bad_server_setting_is_refused_naming_the_key_as_spelled():
    from genEval.commands import bundle

    with pytest.raises(ValueError, match=r"^max_checks must be a whole number >= 0, got -1; e\.g\. max_checks=2"):
        bundle(_compose("serve", ["max_checks=-1"]), "server", home=Path("/h"))
    with pytest.raises(ValueError, match=r"^server\.max_upload_mb must be a number > 0, got 0"):
        bundle(_compose("serve", ["server.max_upload_mb=0"]), "server", home=Path("/h"))


@pytest.mark.parametrize("override", ["exit_when_idle=true", "worker.max_jobs=1"])
def test_serve_refuses_the_batch_worker_settings_for_its_in_process_workers(override):
    """``geneval serve exit_when_idle=true``: an in-process worker that ended would be restarted as dead, over and
    over; the setting belongs to ``geneval worker``, and the error says so (``geneval worker`` takes it)."""
    pytest.importorskip("uvicorn", reason="geneval serve needs the [service] extra")
    from genEval.commands.server import in_process_settings, worker_settings

    key = override.split("=")[0].split(".")[-1]
    with pytest.raises(ValueError, match=rf"^{key} is a setting of `geneval worker` \(a batch worker that stops\)"):
        in_process_settings(_compose("serve", [override]))
    assert in_process_settings(_compose("serve", [])).exit_when_idle is False
    assert worker_settings(_compose("worker", [override])).max_jobs in (None, 1)
