"""An oracle audit a person can do: is the oracle's veto trustworthy? (docs/comparing.md; docs/method.md, "The actors").

PA counts only the images the oracle accepted as still showing their class (paper Sec. 3.2, Algorithm 1), so
PA is only as meaningful as that judge. This module lets a person check it on a run saved with
``save_images=true``:

1. :func:`write_audit` draws ``n`` *validated* samples at random (``numpy.random.default_rng(seed)``, the seed
   recorded) and writes one self-contained HTML page (``audit.html``: images inline as base64 PNG, a
   Content-Security-Policy that allows no request and only the page's own script) showing each (original,
   perturbed) pair side by side at one stated width with its class label. The person marks each pair
   ``same`` (still shows the class), ``changed`` or ``unsure``; the page offers the answers as a JSON file
   (:data:`ANSWERS_KIND`). The drawn sample list is written next to the page (``audit_samples.json``).
2. :func:`record_audit` reads that answers file, checks it belongs to this run (run id, a draw of this run's
   validated samples under the recorded seed, answer values) and stores the human agreement with the oracle
   in the run's ``results.json`` under ``oracle_audit``: the share of pairs marked ``same`` among those not
   marked ``unsure``, in percent with a Wilson 95% interval (:func:`genEval.scores.intervals.proportion`).

The run id (:func:`run_id`) is the sha256 of the run's identity (``run.json``: config, components, seed,
sources) together with its per-sample records (``samples.jsonl``), so an answers file of another run, or of a rerun
whose outcomes differ, is refused.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import markupsafe
import numpy as np
import torch
from PIL import Image

from genEval.fileio import atomic_write_bytes, atomic_write_json, sha256_file
from genEval.reports.html import TEMPLATES
from genEval.runs.reader import RESULTS, RunDir
from genEval.scores.intervals import Estimate, proportion
from genEval.scores.outcomes import SampleRecord

log = logging.getLogger(__name__)

ANSWERS = ("same", "changed", "unsure")
ANSWERS_KIND = "geneval-oracle-audit-answers"
SAMPLES_KIND = "geneval-oracle-audit-samples"
AUDIT_KEY = "oracle_audit"
DEFINITION = (
    "human agreement with the oracle: the share of audited validated (original, perturbed) pairs a person "
    "marked 'same' (the perturbed image still shows the class), among the pairs not marked 'unsure'; "
    "percent with a Wilson 95% interval"
)


def _script() -> str:
    """The page's one script (templates/audit.js); inline, allowed by its sha256 in the page's CSP."""
    return (resources.files("genEval.reports") / "templates" / "audit.js").read_text(encoding="utf-8")


def content_security_policy(script: str) -> str:
    """No request of any kind; images only from data: URLs; only the script whose sha256 is given may run."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    return f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'"


# ----------------------------------------------------------------------------------------------- the draw
def run_id(run: RunDir | str | Path) -> str:
    """sha256 (hex) of the run's identity (run.json) and of its per-sample records: what an audit belongs to."""
    run = RunDir.of(run)
    samples = [r.to_dict() for r in run.samples]
    blob = json.dumps({"identity": run.identity.to_dict(), "samples": samples}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def draw_validated(records: Sequence[SampleRecord], n: int, seed: int) -> list[SampleRecord]:
    """``min(n, V)`` of the ``V`` validated records, in random order: the first ``n`` of a seeded permutation.

    The draw depends only on the validated records (in samples.jsonl order), ``n`` and ``seed``, so an answers
    file is checked by drawing again.
    """
    if n < 1:
        raise ValueError(f"n={n}: an audit needs at least one pair; e.g. n=100.")
    valid = [r for r in records if r.validated]
    if not valid:
        raise ValueError(
            "this run has no validated samples (VR = 0), so there is nothing the oracle accepted to "
            "audit. Audit a run whose oracle accepted some steps."
        )
    order = np.random.default_rng(seed).permutation(len(valid))[:n]
    return [valid[i] for i in order]


# ----------------------------------------------------------------------------------------------- the page
@dataclass(frozen=True)
class AuditPair:
    """One audited sample: its record fields and the two images as PNG bytes (native size, (H, W))."""

    source_id: str
    label: int
    class_name: str
    clean_pred: str
    final_pred: str
    oracle_score: float
    original_png: bytes = field(repr=False)
    perturbed_png: bytes = field(repr=False)
    original_size: tuple[int, int]
    perturbed_size: tuple[int, int]

    def meta(self) -> dict[str, Any]:
        """Everything but the images (the sample list and the page's data)."""
        return {
            "source_id": self.source_id,
            "label": self.label,
            "class_name": self.class_name,
            "clean_pred": self.clean_pred,
            "final_pred": self.final_pred,
            "oracle_score": self.oracle_score,
            "original_size": list(self.original_size),
            "perturbed_size": list(self.perturbed_size),
        }


@dataclass(frozen=True)
class AuditSheet:
    """The drawn pairs of one run and how they are shown: what the page and ``audit_samples.json`` hold."""

    run_dir: str
    run_id: str
    seed: int
    seed_drawn: bool
    n_requested: int
    n_validated: int
    n_samples: int
    width: int
    oracle: str
    classifier: str
    show_predictions: bool
    pairs: list[AuditPair] = field(repr=False)

    @property
    def sample_ids(self) -> list[str]:
        return [p.source_id for p in self.pairs]

    def sample_list(self) -> dict[str, Any]:
        """The content of ``audit_samples.json`` (also embedded in the page, and copied into its answers)."""
        return {
            "kind": SAMPLES_KIND,
            "schema_version": 1,
            "run_id": self.run_id,
            "run_dir": self.run_dir,
            "seed": self.seed,
            "seed_drawn": self.seed_drawn,
            "n": len(self.pairs),
            "n_requested": self.n_requested,
            "n_validated": self.n_validated,
            "n_samples": self.n_samples,
            "display_width": self.width,
            "answers": list(ANSWERS),
            "oracle": self.oracle,
            "classifier": self.classifier,
            "sample_ids": self.sample_ids,
            "pairs": [p.meta() for p in self.pairs],
        }


def _png(image: torch.Tensor) -> bytes:
    """A uint8 (C, H, W) image, C = 1 or 3, as PNG bytes."""
    if image.dtype != torch.uint8 or image.dim() != 3 or image.shape[0] not in (1, 3):
        raise ValueError(
            f"saved image has dtype {image.dtype} and shape {tuple(image.shape)}; expected uint8 "
            "(1 or 3, H, W) as genEval's run writer saves them. Rerun with save_images=true."
        )
    arr = image.permute(1, 2, 0).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr).save(buf, format="PNG")
    return buf.getvalue()


def _name(class_names: Sequence[str], index: int) -> str:
    return class_names[index] if 0 <= index < len(class_names) else str(index)


def build_audit(
    run_dir: RunDir | str | Path,
    n: int = 100,
    *,
    seed: int | None = None,
    width: int = 192,
    show_predictions: bool = False,
) -> AuditSheet:
    """Draw ``n`` validated samples of a finished run saved with ``save_images=true`` and load their images.

    ``seed=None`` draws one (recorded). ``width``: the width in CSS pixels both images of a pair are shown at
    (height by aspect ratio; small images are scaled up pixel by pixel). ``show_predictions``: also show the
    tested model's predictions (off by default so that they do not prime the person).
    """
    if not 16 <= int(width) <= 2048:
        raise ValueError(f"width={width} is outside 16..2048 CSS pixels; e.g. width=192.")
    run = RunDir.of(run_dir)
    results, records = run.results, run.samples
    seed_drawn = seed is None
    seed = secrets.randbits(31) if seed is None else int(seed)
    chosen = draw_validated(records, int(n), seed)
    if len(chosen) < n:
        log.warning("the run has only %d validated samples; the audit shows all of them (n=%d asked)", len(chosen), n)
    names = list(results.class_names)
    loaded: dict[str, AuditPair] = {}
    for recs, tensors in run.parts("images", chosen):
        for i, r in enumerate(recs):
            if not bool(tensors["validated"][i]):
                raise ValueError(
                    f"run '{run}': sample {r.source_id} is validated in samples.jsonl but not in "
                    "its image part; the directory mixes two runs. Rerun the evaluation."
                )
            orig, pert = tensors["original"][i], tensors["perturbed"][i]
            loaded[r.source_id] = AuditPair(
                r.source_id,
                int(r.label),
                _name(names, int(r.label)),
                _name(names, int(r.clean_pred)),
                _name(names, int(r.final_pred)),
                float(r.oracle_score),
                _png(orig),
                _png(pert),
                tuple(orig.shape[-2:]),
                tuple(pert.shape[-2:]),
            )
    components = results.components
    return AuditSheet(
        str(run.path.resolve()),
        run_id(run),
        seed,
        seed_drawn,
        int(n),
        sum(bool(r.validated) for r in records),
        len(records),
        int(width),
        str(components.get("oracle", "")),
        str(components.get("classifier", "")),
        bool(show_predictions),
        [loaded[r.source_id] for r in chosen],
    )


def _shown(size: tuple[int, int], width: int) -> dict[str, Any]:
    """How one image is drawn: its width/height in CSS pixels, and pixelated when scaled up."""
    h, w = size
    return {"w": width, "h": max(1, round(width * h / w)), "pixelated": w < width, "native": f"{w}×{h}"}


def render_audit(sheet: AuditSheet) -> str:
    """The audit page's HTML (templates/audit.html.j2 and audit.js)."""
    script = _script()
    pairs = [
        {
            **p.meta(),
            "original": base64.b64encode(p.original_png).decode(),
            "perturbed": base64.b64encode(p.perturbed_png).decode(),
            "shown_original": _shown(p.original_size, sheet.width),
            "shown_perturbed": _shown(p.perturbed_size, sheet.width),
        }
        for p in sheet.pairs
    ]
    natives = sorted({(p["shown_original"]["native"], p["shown_perturbed"]["native"]) for p in pairs})
    listed = sheet.sample_list()  # the script needs the draw's identity, not the records (no priming data)
    data = {k: listed[k] for k in ("run_id", "run_dir", "seed", "n", "display_width", "sample_ids", "answers")}
    return TEMPLATES.get_template("audit.html.j2").render(
        sheet=sheet,
        pairs=pairs,
        natives=natives,
        data=data,
        answers=ANSWERS,
        csp=content_security_policy(script),
        script=markupsafe.Markup(script),
        written=time.strftime("%Y-%m-%d %H:%M:%S"),
    )


@dataclass(frozen=True)
class AuditFiles:
    """What :func:`write_audit` wrote."""

    page: Path
    samples: Path
    sheet: AuditSheet


def write_audit(
    run_dir: RunDir | str | Path,
    n: int = 100,
    *,
    seed: int | None = None,
    out: str | Path | None = None,
    width: int = 192,
    show_predictions: bool = False,
) -> AuditFiles:
    """Write the audit page (default ``<run>/audit.html``) and, next to it, ``<page stem>_samples.json``."""
    page = Path(out) if out else RunDir.of(run_dir).path / "audit.html"
    if page.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"out={page} must name an .html file (e.g. out={page.with_suffix('.html')}).")
    sheet = build_audit(run_dir, n, seed=seed, width=width, show_predictions=show_predictions)
    page.parent.mkdir(parents=True, exist_ok=True)
    samples = page.with_name(f"{page.stem}_samples.json")
    atomic_write_json(samples, sheet.sample_list())
    atomic_write_bytes(page, render_audit(sheet).encode("utf-8"))
    log.info("audit page with %d pairs (seed %d) written to %s", len(sheet.pairs), sheet.seed, page)
    return AuditFiles(page, samples, sheet)


# ----------------------------------------------------------------------------------------------- the answers
def agreement(counts: dict[str, int], level: float = 0.95) -> Estimate:
    """Share (percent) of ``same`` among ``same + changed`` answers, with a Wilson interval; ``unsure`` is
    left out. Undefined (value None) when every answer was ``unsure``."""
    return proportion(
        int(counts.get("same", 0)),
        int(counts.get("same", 0)) + int(counts.get("changed", 0)),
        "wilson",
        level,
        what="an audit with no 'same' or 'changed' answer",
    )


def read_answers(path: str | Path) -> dict[str, Any]:
    """An answers file the audit page saved, checked for its form (not yet against a run)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"answers file '{p}' does not exist; pass the JSON the audit page downloaded (answers=<path>)."
        )
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"answers file '{p}' is not JSON ({err}); pass the file the audit page downloaded.") from err
    if not isinstance(data, dict) or data.get("kind") != ANSWERS_KIND:
        raise ValueError(
            f"'{p}' is not a genEval audit answers file (its kind is not {ANSWERS_KIND!r}); use the "
            "'Download answers' link of the page `geneval audit run=<dir>` wrote."
        )
    for key, typ in (("run_id", str), ("seed", int), ("sample_ids", list), ("answers", dict)):
        if not isinstance(data.get(key), typ):
            raise ValueError(
                f"answers file '{p}' lacks {key!r} (or it is not a {typ.__name__}); it was edited or "
                "cut short. Download it again from the audit page."
            )
    for sid, value in data["answers"].items():
        if value not in ANSWERS:
            raise ValueError(
                f"answers file '{p}': the answer {value!r} for sample {sid} is not one of "
                f"{', '.join(ANSWERS)}. Mark it again on the audit page."
            )
    return data


def check_answers(run_dir: RunDir | str | Path, answers: dict[str, Any], path: str | Path = "answers") -> None:
    """Raise a ValueError unless ``answers`` (:func:`read_answers`) belong to this run and its recorded draw."""
    run = RunDir.of(run_dir)
    records, rid = run.samples, run_id(run)
    if answers["run_id"] != rid:
        raise ValueError(
            f"answers file '{path}' belongs to run {answers['run_id'][:12]} "
            f"({answers.get('run_dir', 'unknown directory')}), but '{run}' is run {rid[:12]}. "
            "Pass the run directory the audit page was written for."
        )
    known = {r.source_id for r in records}
    unknown = [s for s in [*answers["answers"], *answers["sample_ids"]] if s not in known]
    if unknown:
        raise ValueError(
            f"answers file '{path}' names sample ids that are not samples of run '{run}': "
            f"{sorted(set(unknown))[:5]}. It was edited; download it again from the audit page."
        )
    drawn = [r.source_id for r in draw_validated(records, len(answers["sample_ids"]), answers["seed"])]
    if drawn != answers["sample_ids"]:
        raise ValueError(
            f"answers file '{path}': its sample list is not the draw of seed {answers['seed']} from "
            f"this run's validated samples (the page shows {drawn[:3]} ..., the file lists "
            f"{answers['sample_ids'][:3]} ...). It was edited; download it again from the audit page."
        )
    strays = [s for s in answers["answers"] if s not in set(drawn)]
    if strays:
        raise ValueError(
            f"answers file '{path}' answers samples that were not drawn for this audit (seed "
            f"{answers['seed']}): {strays[:5]}. Download it again from the audit page."
        )


@dataclass(frozen=True)
class AuditResult:
    """The human agreement with the oracle of one audit, as stored in results.json under ``oracle_audit``."""

    agreement: Estimate
    counts: dict[str, int]
    pairs: int
    seed: int
    run_id: str
    run_dir: str
    answers_file: str
    answers_sha256: str
    auditor: str
    answered_at: str
    date: str
    changed_ids: list[str]
    unsure_ids: list[str]

    def to_dict(self) -> dict[str, Any]:
        """Self-describing: the definition, value/low/high, n, k, method, counts, provenance."""
        d = asdict(self)
        return {"definition": DEFINITION, **d.pop("agreement"), "level": 0.95, **d}

    def summary(self) -> str:
        c = self.counts
        return "\n".join(
            [
                f"oracle audit of {self.run_dir}  (run {self.run_id[:12]}, seed {self.seed}, {self.pairs} pairs)",
                f"  agreement with the oracle  {self.agreement.fmt()}   ({self.agreement.k} 'same' of "
                f"{self.agreement.n} judged; {self.agreement.method} 95% interval)",
                f"  same {c['same']}  changed {c['changed']}  unsure {c['unsure']}  unanswered {c['unanswered']}",
                *([f"  WARNING: {c['unanswered']} of {self.pairs} pairs were not answered"] if c["unanswered"] else []),
                f"  stored as '{AUDIT_KEY}' in {Path(self.run_dir) / RESULTS}",
            ]
        )


def score_answers(run_dir: RunDir | str | Path, answers_path: str | Path) -> AuditResult:
    """Read and check an answers file against the run and compute the agreement (writes nothing)."""
    run = RunDir.of(run_dir)
    answers = read_answers(answers_path)
    check_answers(run, answers, answers_path)
    given = answers["answers"]
    counts = {a: sum(v == a for v in given.values()) for a in ANSWERS}
    counts["unanswered"] = len(answers["sample_ids"]) - len(given)
    return AuditResult(
        agreement(counts),
        counts,
        len(answers["sample_ids"]),
        int(answers["seed"]),
        answers["run_id"],
        str(run.path.resolve()),
        str(Path(answers_path).resolve()),
        sha256_file(answers_path),
        str(answers.get("auditor") or ""),
        str(answers.get("saved") or ""),
        time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        [s for s in answers["sample_ids"] if given.get(s) == "changed"],
        [s for s in answers["sample_ids"] if given.get(s) == "unsure"],
    )


def record_audit(run_dir: RunDir | str | Path, answers_path: str | Path) -> AuditResult:
    """Score an answers file (:func:`score_answers`) and store it in ``results.json`` as ``oracle_audit``,
    atomically, every other key kept as it was (an earlier audit entry is replaced)."""
    run = RunDir.of(run_dir)
    result = score_answers(run, answers_path)
    earlier = run.results.oracle_audit
    if earlier is not None:
        log.info("replacing the earlier oracle audit of %s (answers %s)", run, earlier.get("answers_sha256", "?")[:12])
    atomic_write_json(run.path / RESULTS, run.results.with_extra(AUDIT_KEY, result.to_dict()).to_dict())
    return result


__all__ = [
    "ANSWERS",
    "ANSWERS_KIND",
    "AUDIT_KEY",
    "AuditFiles",
    "AuditPair",
    "AuditResult",
    "AuditSheet",
    "agreement",
    "build_audit",
    "check_answers",
    "content_security_policy",
    "draw_validated",
    "read_answers",
    "record_audit",
    "render_audit",
    "run_id",
    "score_answers",
    "write_audit",
]
