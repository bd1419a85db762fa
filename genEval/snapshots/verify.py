"""Checking a snapshot against its manifest (paper App. O): every file's sha256 and every count
(:func:`verify_snapshot`, what ``geneval verify`` prints)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from genEval.fileio import sha256_file
from genEval.snapshots.manifest import MANIFEST, METADATA, ORIGINALS, Manifest, read_metadata, wds_samples
from genEval.snapshots.writer import tree_files

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_snapshot` found; ``ok`` when nothing is missing, extra, modified or miscounted."""

    path: str
    checked: int
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    count_mismatch: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.modified or self.count_mismatch)

    def summary(self, limit: int = 10) -> str:
        lines = [f"snapshot {self.path}: {'OK' if self.ok else 'FAILED'} ({self.checked} files checked)"]
        for what, items in (
            ("missing", self.missing),
            ("extra", self.extra),
            ("modified", self.modified),
            ("count mismatch", self.count_mismatch),
        ):
            if items:
                more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
                lines.append(f"  {what} ({len(items)}): {', '.join(items[:limit])}{more}")
        return "\n".join(lines)


def verify_snapshot(path: str | Path) -> VerifyReport:
    """Check every file's size and sha256, and every count, against ``manifest.json``."""
    root = Path(path).expanduser()
    manifest = Manifest.read(root)
    missing, modified = [], []
    for rel, info in manifest.files.items():
        p = root / rel
        if not p.is_file():
            missing.append(rel)
        elif p.stat().st_size != info.get("size") or sha256_file(p) != info.get("sha256"):
            modified.append(rel)
    extra = [rel for rel in tree_files(root) if rel != MANIFEST and rel not in manifest.files]
    counts = _count_problems(root, manifest, set(missing) | set(modified))
    report = VerifyReport(str(root), len(manifest.files), missing, extra, modified, counts)
    log.log(logging.DEBUG if report.ok else logging.WARNING, "%s", report.summary())
    return report


def _count_problems(root: Path, manifest: Manifest, bad: set[str]) -> list[str]:
    """Counts that disagree with ``counts.samples``; files already found missing or modified are skipped."""
    n = manifest.counts.get("samples")
    if not isinstance(n, int):
        return ["manifest counts.samples is missing"]
    out = []

    def check(what: str, got: int) -> None:
        if got != n:
            out.append(f"{what}: {got} (manifest says {n} samples)")

    check("source_ids in manifest", len(manifest.source_ids))
    per_class = manifest.counts.get("per_class")
    if isinstance(per_class, dict):
        check("sum of per-class counts", sum(per_class.values()))
    if manifest.format == "imagefolder":
        pngs = [r for r in manifest.files if r.endswith(".png")]
        check("perturbed PNGs in manifest", sum(not r.startswith(f"{ORIGINALS}/") for r in pngs))
        check("original PNGs in manifest", sum(r.startswith(f"{ORIGINALS}/") for r in pngs))
        if (root / METADATA).is_file() and METADATA not in bad:
            check(f"rows in {METADATA}", len(read_metadata(root)))
        return out
    check("shard_lengths in manifest", sum(manifest.shard_lengths))
    for shard, length in zip(manifest.shards, manifest.shard_lengths, strict=False):
        if (root / shard).is_file() and shard not in bad:
            got = sum(1 for _ in wds_samples(root / shard))
            if got != length:
                out.append(f"samples in {shard}: {got} (manifest says {length})")
    return out
