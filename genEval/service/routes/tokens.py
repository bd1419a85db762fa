"""``/api/tokens``: create, list and revoke API tokens (admin). A token's secret is shown once, when it is made."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from genEval.service.responses import NewToken, Revoked, Token
from genEval.service.routes.deps import Admin, Facade

router = APIRouter(prefix="/api/tokens", tags=["tokens"])


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    role: Literal["viewer", "submitter", "admin"]


@router.post("", status_code=201, response_model=NewToken)
def create_token(body: TokenIn, svc: Facade, _token: Admin) -> dict:
    """A new token for ``name`` with ``role``; the answer holds its secret, which is never shown again."""
    secret, info = svc.create_token(body.name, body.role)
    return {"token": secret, **vars(info)}


@router.get("", response_model=list[Token])
def tokens(svc: Facade, _token: Admin) -> list[dict]:
    """Every token (revoked ones with ``revoked_at``), without secrets."""
    return [vars(t) for t in svc.tokens()]


@router.delete("/{token_id}", response_model=Revoked)
def revoke(token_id: str, svc: Facade, _token: Admin) -> dict:
    svc.revoke_token(token_id)
    return {"revoked": token_id}
