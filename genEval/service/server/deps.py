"""What the routes take through FastAPI's dependency injection: the service facade and the caller's token.

``Facade`` is the :class:`~genEval.service.server.facade.Service` the app serves (``app.state.service``, set by
:func:`genEval.service.server.app.create_app`); ``MaybeToken`` the request's live token or None; ``Viewer``,
``Submitter`` and ``Admin`` a token with at least that role (roles: :mod:`genEval.service.auth`), else 401 (no or an
unknown token) or 403 (a lower role). Failed authentications with unknown tokens are counted per client address
(:func:`authenticate`); a valid token is never refused for them."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from genEval.service.auth import ROLES, role_allows
from genEval.service.records import TokenInfo
from genEval.service.server.facade import Service


def service(request: Request) -> Service:
    """The facade of the app answering ``request``."""
    return request.app.state.service


Facade = Annotated[Service, Depends(service)]
Credentials = Annotated[
    HTTPAuthorizationCredentials | None,
    Depends(HTTPBearer(auto_error=False, description="an API token made with `geneval token`")),
]


def authenticate(svc: Service, request: Request, secret: str) -> TokenInfo | None:
    """The live token whose secret is ``secret``, or None. A valid token is looked up first and always answered, so
    no one's failures lock its holder out; an unknown one counts against the client address, which after
    ``max_auth_failures`` within ``auth_window_s`` is answered 429 (with Retry-After) instead of 401. The address is
    the peer's own, or, from a proxy the admin trusts (``forwarded_allow_ips``), the one the proxy names."""
    token = svc.db.tokens.find(secret)
    if token is not None:
        return token
    address = request.client.host if request.client else "unknown"
    wait = svc.auth_failures.retry_after(address)
    if wait is not None:
        raise HTTPException(
            429,
            f"too many failed authentications from your address ({svc.auth_failures.limit} in "
            f"{svc.auth_failures.window_s:g} s, server setting max_auth_failures); retry in {wait:.0f} s.",
            headers={"Retry-After": str(max(1, int(wait + 0.999)))},
        )
    svc.auth_failures.add(address)
    return None


def maybe_token(svc: Facade, request: Request, creds: Credentials) -> TokenInfo | None:
    """The request's live token when it sends one, else None (public routes that show admins more)."""
    return None if creds is None else authenticate(svc, request, creds.credentials)


def needs(role: str):
    """A dependency that yields the request's token when it has at least ``role`` (401/403 otherwise; 429 for an
    unknown token from an address that failed too often: :func:`authenticate`)."""

    def check(svc: Facade, request: Request, creds: Credentials) -> TokenInfo:
        if creds is None:
            raise HTTPException(
                401,
                "this needs an API token: send 'Authorization: Bearer <token>' (an admin "
                "creates one with `geneval token`).",
                headers={"WWW-Authenticate": "Bearer"},
            )
        token = authenticate(svc, request, creds.credentials)
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
