"""``/api/tokens`` (admin): create, list and revoke API tokens. A token's secret is shown once, when it is made; the
routes of every other slice find the caller's token through :mod:`~genEval.service.server.deps`."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from genEval.service.records import TokenInfo
from genEval.service.refusals import NotFound, clip
from genEval.service.server.deps import Admin, Facade
from genEval.service.server.views import view_of

Token = view_of(TokenInfo, "Token", "An API token (never its secret).")
NewToken = view_of(
    TokenInfo,
    "NewToken",
    "A token just made, with its secret.",
    extra={"token": (str, Field(description="the secret, shown only in this answer"))},
)


class Revoked(BaseModel):
    revoked: str = Field(description="the revoked token's id")


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    role: Literal["viewer", "submitter", "admin"]


router = APIRouter(prefix="/api/tokens", tags=["tokens"])


@router.post("", status_code=201, response_model=NewToken)
def create_token(body: TokenIn, svc: Facade, _token: Admin) -> dict:
    """A new token for ``name`` with ``role``; the answer holds its secret, which is never shown again."""
    secret, info = svc.db.tokens.create(body.name, body.role)
    return {"token": secret, **vars(info)}


@router.get("", response_model=list[Token])
def tokens(svc: Facade, _token: Admin) -> list[TokenInfo]:
    """Every token (revoked ones with ``revoked_at``), without secrets."""
    return svc.db.tokens.all()


@router.delete("/{token_id}", response_model=Revoked)
def revoke(token_id: str, svc: Facade, _token: Admin) -> dict:
    if not svc.db.tokens.revoke(token_id):
        raise NotFound(f"no live token {clip(token_id, 64)!r}.")
    return {"revoked": token_id}
