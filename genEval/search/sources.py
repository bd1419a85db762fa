"""The sources a run searches: which positions, read how, seeded how (the driver's input side).

* :func:`sample_seed`: every random draw of a sample is seeded from ``(run seed, source id)``, never from its batch,
  so ``batch_size`` and sharding change no decision.
* :func:`source_stream`: the sources at the given positions, read by a DataLoader (workers, pinned memory on CUDA),
  checked against the tensor contract and the class list, and seeded; a source that cannot be decoded
  (:class:`~genEval.interfaces.UnreadableSource`) goes to a callback that stops the run or records the skip.
* :func:`first_readable`, :func:`skips_unreadable`, :func:`source_ids`: what the driver checks before the first batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from genEval.data.base import SubsetData
from genEval.interfaces import ImageDataset, UnreadableSource, check_images, component_id, hook
from genEval.search.perturb import Sample


def sample_seed(seed: int, source_id: str) -> int:
    """The seed of every random draw of one sample: a function of the run seed and the source id only."""
    key = int.from_bytes(hashlib.sha256(source_id.encode()).digest()[:8], "little")
    return int(np.random.SeedSequence([int(seed), key]).generate_state(1)[0])


def source_ids(data: ImageDataset, positions: Sequence[int]) -> list[str] | None:
    """Source ids without reading images, when the data set can tell them (the ``source_id`` hook)."""
    get = hook(data, "source_id")
    return [get(i) for i in positions] if callable(get) else None


def skips_unreadable(data: ImageDataset) -> bool:
    """Whether ``data`` (or the data set a :class:`SubsetData` part is taken from) skips unreadable sources."""
    while isinstance(data, SubsetData):
        data = data.data
    return hook(data, "skip_unreadable") is True


def first_readable(data: ImageDataset, positions: Sequence[int]) -> int:
    """The first position whose source can be read (the first position when the data do not skip unreadable
    sources: its error stops the run before anything is written)."""
    if not skips_unreadable(data):
        return positions[0]
    for position in positions:
        try:
            data[position]
            return position
        except UnreadableSource:
            continue
    raise ValueError(
        f"none of the {len(positions)} sources of {component_id(data)} can be read (data.skip_unreadable=true "
        "skipped every one); check data.root and data.extensions."
    )


class _Sources(torch.utils.data.Dataset):
    """``data`` at ``positions``: item ``k`` is ``(image, label, source id, position)``, or, for a source that
    cannot be decoded, ``(position, UnreadableSource)``, so that the main process decides what it means (stop or
    skip) even when a DataLoader worker read it."""

    def __init__(self, data: ImageDataset, positions: Sequence[int]) -> None:
        self.data, self.positions = data, list(positions)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, k: int):
        position = self.positions[k]
        try:
            x, y, sid = self.data[position]
        except UnreadableSource as err:
            return position, err
        return x, y, sid, position


def collate(items: list[tuple]):
    """A batch of the readable items (stacked images, labels, ids, positions) and the unreadable ones."""
    bad = [it for it in items if len(it) == 2]
    good = [it for it in items if len(it) == 4]
    if not good:
        return None, None, [], [], bad
    xs, ys, ids, positions = zip(*good)
    return torch.stack(xs), torch.as_tensor(ys, dtype=torch.long), list(ids), list(positions), bad


def source_stream(
    data: ImageDataset,
    positions: list[int],
    seed: int,
    batch_size: int,
    num_workers: int,
    device: torch.device,
    on_unreadable: Callable[[int, UnreadableSource], None],
) -> Iterator[Sample]:
    """The sources to search, read by a DataLoader (workers, pinned memory on CUDA), checked, seeded; each source
    that cannot be read goes to ``on_unreadable(position, error)`` (which raises it, or records the skip)."""
    class_names = list(data.class_names)
    loader = torch.utils.data.DataLoader(
        _Sources(data, positions),
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
        collate_fn=collate,
        pin_memory=device.type == "cuda",
    )
    for x, y, ids, where, bad in loader:
        for position, err in bad:
            on_unreadable(position, err)
        if not ids:
            continue
        check_images(x, f"data {component_id(data)} (samples {ids[0]}..{ids[-1]})")
        wrong = (y < 0) | (y >= len(class_names))
        if bool(wrong.any()):
            i = int(wrong.nonzero()[0])
            raise ValueError(
                f"label {int(y[i])} of sample {ids[i]} is outside the class list "
                f"(0..{len(class_names) - 1}: {class_names}). Fix data.class_names."
            )
        for i, sid in enumerate(ids):
            yield Sample(x[i], int(y[i]), sid, seed=sample_seed(seed, sid), index=where[i])
