"""The API's answers as views of the service's records: a response model is made from a record's fields
(:func:`view_of`, pydantic ``from_attributes``), so a record's fields are written once, in
:mod:`genEval.service.records`, not again in a hand-kept response class. The OpenAPI schema at ``/openapi.json``
documents each route's answer with its view, and FastAPI checks every answer against it.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model


def view_of(
    record: type,
    name: str,
    doc: str,
    *,
    exclude: tuple[str, ...] = (),
    optional: tuple[str, ...] = (),
    types: dict[str, Any] | None = None,
    describe: dict[str, str] | None = None,
    extra: dict[str, tuple[Any, Any]] | None = None,
) -> type[BaseModel]:
    """A pydantic model ``name`` with the fields of the dataclass ``record`` (in its order, its types unless
    ``types`` says more, e.g. ``list[int]`` for ``list``), less ``exclude``, with ``optional`` ones absent unless set
    (a route answering with ``response_model_exclude_unset`` leaves them out), ``describe``\\ d fields and ``extra``
    ones (name -> (type, Field)); built from records or objects with those attributes (``from_attributes``)."""
    hints, types, describe = typing.get_type_hints(record), types or {}, describe or {}
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.name in exclude:
            continue
        kind = types.get(f.name, hints[f.name])
        if f.name in optional:
            fields[f.name] = (kind | None, Field(None, description=describe.get(f.name)))
        else:
            fields[f.name] = (kind, Field(description=describe.get(f.name)))
    fields.update(extra or {})
    config = ConfigDict(from_attributes=True)
    return create_model(name, __config__=config, __doc__=doc, __module__=__name__, **fields)


class Refusal(BaseModel):
    """A refused request: why, and the request key at fault when there is one (422s from validation list
    ``keys``, ``count`` and a ``message`` instead; 413s come from the body limit before any route)."""

    detail: Any = Field(description="the reason (a list of errors for a request that fails validation)")
    key: str | None = Field(None, description="the request key at fault")
    message: str | None = Field(None, description="validation errors: every key at fault and its rule, in one line")
    keys: list[str] | None = Field(None, description="validation errors: the keys at fault (the first 20)")
    count: int | None = Field(None, description="validation errors: how many there were")
