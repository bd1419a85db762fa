"""API tokens: random secrets shown once, stored only as their sha256, each with one role.

Roles are ordered; a token may do what its role and every lower role may:

* ``viewer`` - read the whole job queue (``GET /api/jobs``, ``GET /api/workers``), e.g. for a dashboard.
* ``submitter`` - upload models and submit jobs, cancel its own jobs.
* ``admin`` - everything: create and revoke tokens, cancel or re-queue any job.

Public (no token): the leaderboard pages, benchmark list, one job's status, its results.json, report and
snapshot. A token is 32 random bytes (``secrets.token_urlsafe``) with a ``gev_`` prefix so it is recognisable
in a leaked log; sha256 is enough for a secret of that entropy (no dictionary to guess from).
"""

from __future__ import annotations

import hashlib
import secrets

ROLES = ("viewer", "submitter", "admin")
TOKEN_PREFIX = "gev_"


def new_token() -> str:
    """A fresh API token (shown to its owner once, never stored)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The stored form of a token: hex sha256 of its UTF-8 bytes."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_role(role: str) -> str:
    """``role`` if it is one of :data:`ROLES`, else a ValueError listing them."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}.")
    return role


def role_allows(role: str, needed: str) -> bool:
    """True when a token with ``role`` may do what ``needed`` may (roles are ordered, see module doc)."""
    return ROLES.index(check_role(role)) >= ROLES.index(check_role(needed))
