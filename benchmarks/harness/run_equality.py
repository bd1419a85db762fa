"""What "the same run" and "the same comparison" mean when one is computed two ways (unsharded and sharded, local
and on Ray): every decision of every sample record, the scores, and a comparison's conclusions. Shared by
``python -m benchmarks.cluster`` and the tests that assert the same equalities (tests/runs/test_scale_out.py,
tests/comparisons/test_ray_cluster.py, tests/comparisons/test_executors.py)."""

from __future__ import annotations

import json
from pathlib import Path

#: The fields of a sample record (samples.jsonl) that are decisions: equal however the run was batched or sharded.
DECISIONS = (
    "source_id",
    "index",
    "start_ok",
    "validated",
    "accepted_steps",
    "rejected_at",
    "first_fooled",
    "final_pred",
    "recon_pred",
    "clean_pred",
    "oracle_start_pred",
)


def decisions(run_dir: Path) -> list[tuple]:
    """Each record's :data:`DECISIONS`, in file order."""
    lines = (Path(run_dir) / "samples.jsonl").read_text().splitlines()
    return [tuple(json.loads(line)[k] for k in DECISIONS) for line in lines]


def scores(run_dir: Path) -> tuple[dict, list]:
    """A run's scores and per-class table (results.json)."""
    res = json.loads((Path(run_dir) / "results.json").read_text())
    return res["scores"], res["per_class"]


def verdicts(out_dir: str | Path) -> dict:
    """What the comparison written into ``out_dir`` concludes (its comparison.json: scores, ranks, differences,
    stability, per-class tables, seeds, warnings), without run times and paths, which differ wherever it ran."""
    d = json.loads((Path(out_dir) / "comparison.json").read_text())
    paths = ("time_s", "time_per_sample_s", "run_dirs")
    d["leaderboard"] = [{k: v for k, v in row.items() if k not in paths} for row in d["leaderboard"]]
    d["settings"].pop("created")
    return {k: v for k, v in d.items() if k not in ("runs", "out_dir")}
