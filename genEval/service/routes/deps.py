"""What the routes take through FastAPI's dependency injection: the service facade and the caller's token.

``Facade`` is the :class:`~genEval.service.core.Service` the app serves (``app.state.service``, set by
:func:`genEval.service.api.create_app`); ``MaybeToken`` the request's live token or None; ``Viewer``, ``Submitter``
and ``Admin`` a token with at least that role (roles: :mod:`genEval.service.auth`), else 401 (no or an unknown
token) or 403 (a lower role).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from genEval.service.auth import ROLES, role_allows
from genEval.service.core import Service
from genEval.service.records import TokenInfo


def service(request: Request) -> Service:
    """The facade of the app answering ``request``."""
    return request.app.state.service


Facade = Annotated[Service, Depends(service)]
Credentials = Annotated[
    HTTPAuthorizationCredentials | None,
    Depends(HTTPBearer(auto_error=False, description="an API token made with `geneval token`")),
]


def maybe_token(svc: Facade, creds: Credentials) -> TokenInfo | None:
    """The request's live token when it sends one, else None (public routes that show admins more)."""
    return None if creds is None else svc.token_for(creds.credentials)


def needs(role: str):
    """A dependency that yields the request's token when it has at least ``role`` (401/403 otherwise)."""

    def check(svc: Facade, creds: Credentials) -> TokenInfo:
        if creds is None:
            raise HTTPException(
                401,
                "this needs an API token: send 'Authorization: Bearer <token>' (an admin "
                "creates one with `geneval token`).",
                headers={"WWW-Authenticate": "Bearer"},
            )
        token = svc.token_for(creds.credentials)
        if token is None:
            raise HTTPException(401, "unknown or revoked API token.", headers={"WWW-Authenticate": "Bearer"})
        if not role_allows(token.role, role):
            raise HTTPException(403, f"this needs a {role} token (roles: {', '.join(ROLES)}); yours is {token.role}.")
        return token

    return check


MaybeToken = Annotated[TokenInfo | None, Depends(maybe_token)]
Viewer = Annotated[TokenInfo, Depends(needs("viewer"))]
Submitter = Annotated[TokenInfo, Depends(needs("submitter"))]
Admin = Annotated[TokenInfo, Depends(needs("admin"))]
