"""``geneval audit run=<dir> [n=100]`` writes the oracle audit page; ``... answers=<file>`` scores it
(conf/audit.yaml, genEval/reports/audit.py)."""

from __future__ import annotations

from omegaconf import DictConfig

from genEval.commands import command, require
from genEval.reports.audit import record_audit, write_audit
from genEval.runs.shards import resolve_run_dir


@command("audit")
def run_audit(cfg: DictConfig) -> dict:
    run = str(resolve_run_dir(require(cfg, "run", "audit", "run=<run directory made with save_images=true> n=100")))
    if cfg.get("answers"):
        result = record_audit(run, str(cfg.answers))
        print(result.summary())
        return result.to_dict()
    seed = cfg.get("seed")
    files = write_audit(
        run,
        int(cfg.get("n", 100)),
        seed=None if seed is None else int(seed),
        out=cfg.get("out") or None,
        width=int(cfg.get("width", 192)),
        show_predictions=bool(cfg.get("show_predictions", False)),
    )
    sheet = files.sheet
    print(
        f"audit page with {len(sheet.pairs)} of {sheet.n_validated} validated pairs (seed {sheet.seed}) "
        f"written to {files.page}\n  sample list: {files.samples}\n  open the page in a browser, mark each "
        f"pair, download the answers, then: geneval audit run={run} answers=<downloaded file>"
    )
    return sheet.sample_list()
