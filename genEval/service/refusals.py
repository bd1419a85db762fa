"""What the service refuses, as exceptions the server (:mod:`genEval.service.server`) raises and its API turns into
answers (:mod:`genEval.service.server.app`): ``{"detail": message}``, plus ``"key"`` naming the offending request key
when there is one. Each kind carries its HTTP status, so the server says *what* went wrong and the API only how to
answer it; nothing here needs the web framework."""

from __future__ import annotations

#: The longest refusal message and offending key answered (characters); what a client sent is cut to these.
MAX_DETAIL, MAX_KEY = 1000, 100


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (marked with "..." when cut): what a client sent, shown bounded."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


class Refused(Exception):
    """A request refused; ``status`` is the HTTP answer (400 unless a subclass or ``status=`` says otherwise),
    ``key`` the request key at fault (``"model.upload"``), if any."""

    status = 400
    headers: dict[str, str] = {}

    def __init__(self, message: str, key: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message, self.key = message, key
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict:
        """The JSON the client reads (bounded: a request's key or value is never echoed at length)."""
        return {"detail": clip(self.message, MAX_DETAIL), **({"key": clip(self.key, MAX_KEY)} if self.key else {})}


class TooMany(Refused):
    """Over a quota or a rate limit (429); the client may try again after ``retry_after`` seconds."""

    status = 429

    def __init__(self, message: str, retry_after: float, key: str | None = None) -> None:
        super().__init__(message, key)
        self.retry_after = max(1, int(retry_after + 0.999))
        self.headers = {"Retry-After": str(self.retry_after)}


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
