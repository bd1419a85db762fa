"""The server's shared fixtures: ``svc``, a digits_smoke service (tests.support.service.smoke_service) of the
module's ``presets`` fixture under the test's folder, and ``client``, FastAPI's TestClient of its app. A module that
needs other settings defines its own ``svc`` (the uploads' limits)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from genEval.service.server.app import create_app
from tests.support.service import smoke_service


@pytest.fixture
def svc(tmp_path, presets):
    service = smoke_service(tmp_path, presets)
    yield service
    service.db.close()


@pytest.fixture
def client(svc):
    return TestClient(create_app(svc))
