"""Run directories written by hand (not with genEval's writers), with known outcomes, for known-answer tests."""

from __future__ import annotations

import json
from pathlib import Path

# Three models x two repetitions on four source images (labels cat, dog, cat, dog), every sample validated.
# clean / final: 1 = the model is right on the clean / final perturbed image.
HAND = {
    "A": {"clean": [[1, 1, 1, 1], [1, 1, 1, 1]], "final": [[1, 1, 0, 0], [1, 1, 1, 0]]},  # SA 100, PA 50 | 75
    "B": {"clean": [[1, 1, 0, 0], [1, 1, 0, 0]], "final": [[1, 0, 0, 0], [1, 1, 0, 0]]},  # SA 50, PA 25 | 50
    "C": {"clean": [[1, 1, 1, 0], [1, 1, 1, 0]], "final": [[1, 1, 1, 0], [1, 0, 0, 0]]},  # SA 75, PA 75 | 25
}
LABELS = [0, 1, 0, 1]


def write_hand_runs(root: Path) -> Path:
    """Run directories in the runs/<model>/rep<r> layout, written by hand (not with genEval's writers)."""
    for model, outcome in HAND.items():
        for r in (0, 1):
            d = root / "runs" / model / f"rep{r}"
            d.mkdir(parents=True)
            recs = [{"source_id": f"s{i}", "label": y, "clean_pred": y if outcome["clean"][r][i] else 1 - y,
                     "recon_pred": y, "start_ok": True, "validated": True, "accepted_steps": 3,
                     "rejected_at": -1, "first_fooled": -1 if outcome["final"][r][i] else 2,
                     "final_pred": y if outcome["final"][r][i] else 1 - y, "oracle_start_pred": y,
                     "oracle_score": 0.9} for i, y in enumerate(LABELS)]
            (d / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
            (d / "results.json").write_text(json.dumps({
                "scores": {"num_classes": 2}, "class_names": ["cat", "dog"], "seed": 100 + r,
                "components": {"data": "hand", "generator": "g", "oracle": "o", "classifier": model},
                "config": {"search": {"budget": 3}}}))
    return root / "runs"
