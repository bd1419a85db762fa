"""Run directories written by hand (not with genEval's writers), with known outcomes, for known-answer tests."""

from __future__ import annotations

import json
from pathlib import Path

# Three models x two repetitions on eight source images (labels cat, dog, cat, dog, ...), every sample validated:
# the four outcomes below, each on two sources (s<i> and s<i+4>), so every fraction is that of the four and the
# bootstrap has enough sources for an interval. clean / final: 1 = the model is right on the clean / final
# perturbed image. For every model the oracle is wrong on the clean image of the fourth outcome (oracle clean
# accuracy 75) and the first outcome's final image moved less than 1/255 (unchanged share 25).
HAND = {
    "A": {"clean": [[1, 1, 1, 1], [1, 1, 1, 1]], "final": [[1, 1, 0, 0], [1, 1, 1, 0]]},  # SA 100, PA 50 | 75
    "B": {"clean": [[1, 1, 0, 0], [1, 1, 0, 0]], "final": [[1, 0, 0, 0], [1, 1, 0, 0]]},  # SA 50, PA 25 | 50
    "C": {"clean": [[1, 1, 1, 0], [1, 1, 1, 0]], "final": [[1, 1, 1, 0], [1, 0, 0, 0]]},  # SA 75, PA 75 | 25
}
LABELS = [0, 1, 0, 1]
COPIES = 2  # each outcome on this many source images
#: The classifier's softmax probability of the class it predicts, (when right, when wrong), on the clean and the final
#: image alike (two classes: the other class gets the rest); the oracle's class on every final image is the label.
CONFIDENCE = {"A": (0.9, 0.6), "B": (0.8, 0.7), "C": (0.95, 0.55)}


def confidence_fields(model: str, label: int, clean_ok: int, final_ok: int) -> dict:
    """A hand-made record's confidence (issue 44): top-2 probabilities and classes, entropies, the whole final
    softmax vector and the oracle's class, from :data:`CONFIDENCE`."""
    import math

    out = {}
    for side, ok in (("clean", clean_ok), ("final", final_ok)):
        p = CONFIDENCE[model][0 if ok else 1]
        pred = label if ok else 1 - label
        out[f"{side}_top_probs"] = [p, round(1 - p, 10)]
        out[f"{side}_top_classes"] = [pred, 1 - pred]
        out[f"{side}_entropy"] = -(p * math.log(p) + (1 - p) * math.log(1 - p))
        if side == "final":
            out["final_probs"] = [p, round(1 - p, 10)] if pred == 0 else [round(1 - p, 10), p]
    return out | {"oracle_final_pred": label}


def write_hand_runs(root: Path) -> Path:
    """Run directories in the runs/<model>/rep<r> layout, written by hand (not with genEval's writers)."""
    for model, outcome in HAND.items():
        for r in (0, 1):
            d = root / "runs" / model / f"rep{r}"
            d.mkdir(parents=True)
            recs = [
                {
                    "source_id": f"s{c * len(LABELS) + i}",
                    "label": y,
                    "clean_pred": y if outcome["clean"][r][i] else 1 - y,
                    "recon_pred": y,
                    "start_ok": True,
                    "validated": True,
                    "accepted_steps": 3,
                    "rejected_at": -1,
                    "first_fooled": -1 if outcome["final"][r][i] else 2,
                    "final_pred": y if outcome["final"][r][i] else 1 - y,
                    "oracle_start_pred": y,
                    "oracle_clean_pred": 1 - y if i == 3 else y,
                    "reference": y,
                    "image_linf": 0.5 / 255 if i == 0 else 0.1,
                    "oracle_score": 0.9,
                    **confidence_fields(model, y, outcome["clean"][r][i], outcome["final"][r][i]),
                }
                for c in range(COPIES)
                for i, y in enumerate(LABELS)
            ]
            (d / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
            (d / "results.json").write_text(
                json.dumps(
                    {
                        "scores": {"num_classes": 2},
                        "class_names": ["cat", "dog"],
                        "seed": 100 + r,
                        "components": {"data": "hand", "generator": "g", "oracle": "o", "classifier": model},
                        "config": {"search": {"budget": 3}},
                    }
                )
            )
    return root / "runs"
