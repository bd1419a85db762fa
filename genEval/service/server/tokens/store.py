"""The ``tokens`` table and its store: API tokens, kept as the sha256 of their secret (:mod:`genEval.service.auth`)."""

from __future__ import annotations

from sqlalchemy import Float, String, select, update
from sqlalchemy.orm import Mapped, mapped_column

from genEval.service.auth import check_role, hash_token, new_token
from genEval.service.records import TokenInfo, new_id
from genEval.service.server.session import Base, Sessions, record


class TokenRow(Base):
    __tablename__ = "tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class TokenStore:
    """The ``tokens`` table."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    def create(self, name: str, role: str) -> tuple[str, TokenInfo]:
        """A new token for ``name`` with ``role``: returns the secret (show it once) and its record."""
        check_role(role)
        if not name or len(name) > 200:
            raise ValueError("a token needs a name (who holds it), at most 200 characters.")
        secret = new_token()
        row = TokenRow(id=new_id(), name=name, role=role, token_sha256=hash_token(secret))
        with self.sessions.write() as s:
            row.created_at = self.sessions.now_in(s)
            s.add(row)
        return secret, record(TokenInfo, row)

    def find(self, secret: str) -> TokenInfo | None:
        """The live (not revoked) token whose secret this is, or None."""
        with self.sessions.read() as s:
            row = s.scalars(select(TokenRow).where(TokenRow.token_sha256 == hash_token(secret))).first()
            return None if row is None or row.revoked_at is not None else record(TokenInfo, row)

    def all(self) -> list[TokenInfo]:
        """Every token, oldest first (revoked ones with ``revoked_at``)."""
        with self.sessions.read() as s:
            return [record(TokenInfo, r) for r in s.scalars(select(TokenRow).order_by(TokenRow.created_at))]

    def revoke(self, token_id: str) -> bool:
        """Revoke a live token; False when there is none of that id."""
        with self.sessions.write() as s:
            res = s.execute(
                update(TokenRow)
                .where(TokenRow.id == token_id, TokenRow.revoked_at.is_(None))
                .values(revoked_at=self.sessions.now_in(s))
            )
            return res.rowcount == 1
