"""Static benchmark snapshots of generated images (paper App. O), one job a module: ``manifest`` (the format: its
constants, the manifest, the PNG codec), ``writer`` (the one atomic writer of both layouts), ``export`` (a finished
run as a snapshot), ``reader`` (reading one back), ``verify`` (checking it against its manifest); ``scoring``
scores classifiers on them (and the transfer matrix, App. D), ``filtration`` keeps what fools a set of surrogate
models (the ImageNet-A recipe)."""

from genEval.snapshots.export import export_snapshot
from genEval.snapshots.manifest import FORMATS, Manifest, SnapshotError
from genEval.snapshots.reader import Snapshot, SnapshotDataset, load_snapshot
from genEval.snapshots.verify import VerifyReport, verify_snapshot
from genEval.snapshots.writer import SnapshotItem, SnapshotLatents, write_snapshot

__all__ = [
    "FORMATS",
    "Manifest",
    "Snapshot",
    "SnapshotDataset",
    "SnapshotError",
    "SnapshotItem",
    "SnapshotLatents",
    "VerifyReport",
    "export_snapshot",
    "load_snapshot",
    "verify_snapshot",
    "write_snapshot",
]
