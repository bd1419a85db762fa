"""What the service refuses, as exceptions the facade (:class:`genEval.service.core.Service`) raises and the API turns
into answers (:mod:`genEval.service.api`): ``{"detail": message}``, plus ``"key"`` naming the offending request key
when there is one. Each kind carries its HTTP status, so the facade says *what* went wrong and the API only how
to answer it; nothing here needs the web framework.
"""

from __future__ import annotations


class Refused(Exception):
    """A request refused; ``status`` is the HTTP answer (400 unless a subclass or ``status=`` says otherwise),
    ``key`` the request key at fault (``"model.upload"``), if any."""

    status = 400

    def __init__(self, message: str, key: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message, self.key = message, key
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict:
        """The JSON the client reads."""
        return {"detail": self.message, **({"key": self.key} if self.key else {})}


class Forbidden(Refused):
    """The token may not do this (403)."""

    status = 403


class NotFound(Refused, LookupError):
    """No such job, token, benchmark, repetition or version (404)."""

    status = 404


class Conflict(Refused):
    """Not in this state: a job not done yet, already final, a name taken (409)."""

    status = 409


class Invalid(Refused):
    """A request value the service does not take (422, naming its key)."""

    status = 422
