"""Issue 41's attacks on uploads, kept as regressions: an upload that reads a server file (E1), upload quotas in
one process's memory and one token's hanging checks (E6, E3). Each failed on the code before issue 41
(tests/service/server/test_service_sandbox.py has the evaluation child's sandbox and the other attacks)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from genEval.service.refusals import TooMany
from genEval.service.server.app import create_app
from genEval.service.server.database import sqlite_url
from tests.support.sandbox import ReadsAFile, script
from tests.support.service import bearer, smoke_service


# ------------------------------------------------------------------------------------ E1: an upload reads a file
def test_an_upload_that_reads_a_file_is_refused_naming_the_op_and_leaves_nothing(tmp_path, presets):
    """The interface line: ``curl -F file=@reads_a_file.pt ... /api/uploads`` is refused, naming the op, before the
    file is loaded (so nothing is read), and nothing is kept."""
    secret = tmp_path / "secret.txt"
    secret.write_text("db-password=hunter2-0123456789")
    model = script(ReadsAFile(str(secret)), tmp_path / "reads_a_file.pt")
    svc = smoke_service(tmp_path / "home", presets, check_timeout_s=60)
    client = TestClient(create_app(svc))
    answer = client.post("/api/uploads", files={"file": ("reads_a_file.pt", model.read_bytes())},
                         headers=bearer(svc.db))  # fmt: skip
    assert answer.status_code == 422, answer.text
    assert "aten::from_file" in answer.json()["detail"] and "hunter2" not in answer.text
    assert not list((tmp_path / "home" / "uploads").iterdir())


# ------------------------------------------------------------------------------------ E6, E3: quotas
def test_the_upload_quota_is_counted_in_the_database_across_servers_and_restarts(tmp_path, presets):
    """Issue 41 (E6): the quota lived in the server's memory, so a restart or a second server granted 20 more."""
    url = sqlite_url(tmp_path / "geneval.db")
    first = smoke_service(tmp_path, presets, url, max_uploads_per_hour=3)
    owner = first.db.tokens.create("alice", "submitter")[1]
    for _ in range(2):
        first.uploads.may_upload(owner)
    second = smoke_service(tmp_path, presets, url, max_uploads_per_hour=3)  # another server process on the database
    second.uploads.may_upload(owner)
    for svc in (first, second, smoke_service(tmp_path, presets, url, max_uploads_per_hour=3)):  # and one restarted
        with pytest.raises(TooMany, match="made 3 uploads in the last hour.*max_uploads_per_hour"):
            svc.uploads.may_upload(owner)
    admin = first.db.tokens.create("root", "admin")[1]
    for _ in range(5):
        first.uploads.may_upload(admin)  # admins have none


def test_one_token_cannot_hold_every_check_slot(tmp_path, presets):
    """Issue 41 (E3): max_checks was global, so two submitters with hanging uploads kept both slots busy."""
    svc = smoke_service(tmp_path, presets, max_checks=2, max_checks_per_token=1)
    alice, bob = (svc.db.tokens.create(n, "submitter")[1] for n in ("alice", "bob"))
    with svc.uploads._check_slot(alice):
        with pytest.raises(TooMany, match="token 'alice' has 1 upload.*max_checks_per_token"):
            with svc.uploads._check_slot(alice):
                pass
        with svc.uploads._check_slot(bob):  # another token still gets the other slot
            pass
    with svc.uploads._check_slot(alice):  # freed
        pass
