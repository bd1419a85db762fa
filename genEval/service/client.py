"""A small HTTP client for the service API (what ``geneval submit`` uses; usable from a notebook)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from genEval.service.records import FINAL


class ServiceError(ValueError):
    """The server refused a request; the message carries its status and explanation."""


class ServiceClient:
    """``ServiceClient("http://127.0.0.1:8000", token)``: upload a model file, submit a job, follow it."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            r = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise ServiceError(f"cannot reach the genEval service at {self.url}: {err}") from None
        if r.status_code >= 400:
            try:
                body = r.json()
                detail = body.get("message") or body.get("detail")
            except ValueError:
                detail = r.text[:500]
            raise ServiceError(f"{method} {path} answered {r.status_code}: {detail}")
        return r.json()

    def upload(self, path: str | Path) -> dict:
        """Upload a safetensors or TorchScript file; returns ``{"id", "kind", "sha256", ...}``."""
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"model file not found: '{p}'.")
        with open(p, "rb") as fh:
            return self._call("POST", "/api/uploads", files={"file": (p.name, fh, "application/octet-stream")})

    def submit(self, benchmark: str, name: str, model: dict, overrides: dict | None = None) -> dict:
        return self._call(
            "POST",
            "/api/jobs",
            json={"benchmark": benchmark, "name": name, "model": model, "overrides": overrides or {}},
        )

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"/api/jobs/{job_id}")

    def results(self, job_id: str, rep: int = 0) -> dict:
        """A done job's repetition ``rep``: its run's ``results.json`` (docs/run-directory.md)."""
        return self._call("GET", f"/api/jobs/{job_id}/results.json", params={"rep": int(rep)})

    def wait(self, job_id: str, timeout_s: float = 3600.0, poll_s: float = 2.0, on_update=None) -> dict:
        """Poll until the job is done, failed or cancelled (``on_update(job)`` after each poll)."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if on_update is not None:
                on_update(job)
            if job["status"] in FINAL:
                return job
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"job {job_id} is still {job['status']} after {timeout_s:.0f}s (raise timeout_s); "
                    f"follow it at {self.url}/jobs/{job_id}."
                )
            time.sleep(poll_s)
