"""Assets by name (genEval/assets.py): found in an assets folder or the cache, else downloaded and checked by sha256.

Downloads are served by a throwaway HTTP server on 127.0.0.1; nothing here reaches the internet.
"""

from __future__ import annotations

import hashlib
import http.server
import socket
import threading
import time
from pathlib import Path

import pytest

from genEval import assets
from genEval.assets import ASSETS as TABLE
from genEval.assets import Asset, resolve
from genEval.checkpoints import load_checkpoint
from tests.support.assets import ASSETS

PAYLOAD = b"not really weights, but bytes with a known sha256\n" * 100
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _Server:
    """Serves ``files`` (URL path -> bytes) on 127.0.0.1 and counts the requests."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the stdlib's name)
                outer.requests.append(self.path)
                body = files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_asset(monkeypatch, tmp_path):
    """Register ``weights/test/fake.bin`` (served at /fake.bin) with no assets folder and an empty cache."""
    monkeypatch.delenv("GENEVAL_ASSETS", raising=False)
    monkeypatch.delenv("GENEVAL_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path / "cache"))

    def register(url: str, sha: str = SHA) -> Asset:
        a = Asset("weights/test/fake.bin", url, sha, "a test server", "none")
        monkeypatch.setitem(TABLE, a.path, a)
        return a

    return register


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plain_paths_pass_through_and_unknown_assets_are_named():
    assert resolve("~/x/model.pt") == Path.home() / "x" / "model.pt"
    with pytest.raises(ValueError, match=r"unknown asset 'asset:weights/nope.pth'; known assets: asset:weights/"):
        resolve("asset:weights/nope.pth")


def test_a_missing_asset_is_downloaded_once_checked_and_cached(fake_asset, tmp_path):
    with _Server({"/fake.bin": PAYLOAD}) as srv:
        fake_asset(srv.url + "/fake.bin")
        p = resolve("asset:weights/test/fake.bin")
        assert p == tmp_path / "cache" / "assets" / "weights" / "test" / "fake.bin"
        assert p.read_bytes() == PAYLOAD
        assert resolve("asset:weights/test/fake.bin") == p
        assert srv.requests == ["/fake.bin"]  # the second call used the cache
    assert resolve("asset:weights/test/fake.bin") == p  # and needs no server any more
    assert sorted(x.name for x in p.parent.iterdir()) == ["fake.bin"]


def test_a_download_with_the_wrong_sha256_is_discarded(fake_asset, tmp_path):
    with _Server({"/fake.bin": PAYLOAD[:-1] + b"?"}) as srv:
        fake_asset(srv.url + "/fake.bin")
        with pytest.raises(ValueError, match=rf"has sha256 [0-9a-f]{{64}}, expected {SHA}; it was discarded"):
            resolve("asset:weights/test/fake.bin")
    folder = tmp_path / "cache" / "assets" / "weights" / "test"
    assert not folder.exists() or list(folder.iterdir()) == []  # no file, no half-written temp file


def test_an_unreachable_url_says_which_file_where_from_and_about_geneval_assets(fake_asset):
    url = f"http://127.0.0.1:{_free_port()}/fake.bin"  # nothing listens there
    fake_asset(url)
    t0 = time.monotonic()
    with pytest.raises(FileNotFoundError) as err:
        resolve("asset:weights/test/fake.bin")
    msg = str(err.value)
    assert "weights/test/fake.bin" in msg and url in msg and "GENEVAL_ASSETS" in msg and SHA in msg
    assert "\n" not in msg and time.monotonic() - t0 < assets.TIMEOUT_S


def test_offline_makes_no_request(fake_asset, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with _Server({"/fake.bin": PAYLOAD}) as srv:
        fake_asset(srv.url + "/fake.bin")
        with pytest.raises(FileNotFoundError, match="downloads are off"):
            resolve("asset:weights/test/fake.bin")
        assert srv.requests == []


def test_the_assets_folder_comes_first_and_a_changed_file_is_refused(fake_asset, monkeypatch, tmp_path):
    folder = tmp_path / "assets"
    (folder / "weights" / "test").mkdir(parents=True)
    good = folder / "weights" / "test" / "fake.bin"
    good.write_bytes(PAYLOAD)
    monkeypatch.setenv("GENEVAL_ASSETS", str(folder))
    with _Server({"/fake.bin": PAYLOAD}) as srv:
        fake_asset(srv.url + "/fake.bin")
        assert resolve("asset:weights/test/fake.bin") == good
        good.write_bytes(PAYLOAD + b"x")
        with pytest.raises(ValueError, match=rf"'{good}' is not the expected weights/test/fake.bin .*expected {SHA}"):
            resolve("asset:weights/test/fake.bin")
        assert srv.requests == []


def test_a_missing_folder_asset_says_what_to_use_instead(monkeypatch, tmp_path):
    monkeypatch.setenv("GENEVAL_ASSETS", str(tmp_path))
    monkeypatch.setattr(assets, "asset_folders", lambda: [tmp_path])  # no checkout copy either
    with pytest.raises(FileNotFoundError, match="cifar10/test-jpg.*GENEVAL_ASSETS.*data=cifar10 data.download=true"):
        resolve("asset:cifar10/test-jpg")


def test_the_table_matches_the_real_files():
    """The recorded sha256 of every file asset is that of the real file (the offline copy in ../shared/assets)."""
    if not ASSETS.is_dir():
        pytest.skip("../shared/assets is absent")
    for rel, a in TABLE.items():
        p = ASSETS / rel
        if a.is_folder:
            assert p.is_dir() and len(list(p.iterdir())) == 10, rel  # one folder per CIFAR-10 class
            continue
        assert hashlib.sha256(p.read_bytes()).hexdigest() == a.sha256, rel
        assert a.url.startswith("https://github.com/") and a.url.endswith(Path(rel).name), rel


def test_loaders_take_asset_names(monkeypatch):
    if not (ASSETS / "weights" / "taef2" / "taef2_encoder.pth").is_file():
        pytest.skip("../shared/assets is absent")
    monkeypatch.setenv("GENEVAL_ASSETS", str(ASSETS))
    sd = load_checkpoint("asset:weights/taef2/taef2_encoder.pth", what="TAEF2 encoder")
    assert "0.weight" in sd


def test_assets_on_the_command_line_set_the_folder(monkeypatch, tmp_path):
    from omegaconf import OmegaConf

    from genEval.commands import use_assets

    monkeypatch.setenv("GENEVAL_ASSETS", "/elsewhere")
    use_assets(OmegaConf.create({"assets": str(tmp_path)}))
    assert assets.asset_folders()[0] == tmp_path
    use_assets(OmegaConf.create({"assets": None}))  # unset: the environment stays as it is
    assert assets.asset_folders()[0] == tmp_path
