"""``geneval report input=<run dir or comparison dir> [out=<file>]`` (conf/report.yaml)."""

from __future__ import annotations

from omegaconf import DictConfig

from genEval.commands import command, require
from genEval.reports.report import write_report
from genEval.runs.shards import resolve_run_dir


@command("report")
def run_report(cfg: DictConfig) -> str:
    source = resolve_run_dir(require(cfg, "input", "report", "input=<run directory or comparison directory>"))
    path = write_report(
        str(source),
        cfg.get("out") or None,
        grid_samples=int(cfg.get("grid_samples", 6)),
        transfer=cfg.get("transfer") or None,
    )
    print(f"report written to {path}")
    return str(path)
