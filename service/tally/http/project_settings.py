"""A project's fields as the API takes and shows them: the name and time-zone checks that
``POST`` and ``PATCH /api/projects`` share (in plain words, as ``Invalid payload`` details), and
the project as listed."""

from __future__ import annotations

from typing import Any

from litestar.datastructures import State
from litestar.exceptions import ValidationException
from litestar.openapi.spec import Schema
from litestar.openapi.spec.enums import OpenAPIType

from ..domain import projects as rules
from ..domain.ids import iso
from ..storage.projects import ProjectRow, ProjectStore
from . import schemas as s


def listed(row: ProjectRow) -> s.Project:
    """A project as ``GET /api/projects`` lists it."""
    return s.Project(
        id=row.id,
        name=row.name,
        created_at=iso(row.created_at),
        timezone=row.timezone,
        exclude_bots=row.exclude_bots,
    )


def _invalid(field: str, message: str) -> ValidationException:
    return ValidationException(
        detail="Validation failed", extra=[{"message": message, "key": field, "source": "body"}]
    )


def clean_name(name: str) -> str:
    try:
        return rules.clean_name(name)
    except rules.InvalidProject as exc:
        raise _invalid(exc.field, exc.message) from None


def clean_label(label: str | None) -> str | None:
    """A key's label as stored (None: not given, the default label)."""
    if label is None:
        return None
    try:
        return rules.clean_label(label)
    except rules.InvalidProject as exc:
        raise _invalid(exc.field, exc.message) from None


async def clean_timezone(state: State, timezone: str) -> str:
    """An IANA zone that the engine knows too (the dashboard computes its days there)."""
    store: ProjectStore = state.store
    try:
        rules.check_timezone(timezone)
    except rules.InvalidProject as exc:
        raise _invalid(exc.field, exc.message) from None
    if not await state.storage.run(store.zone_supported, timezone):
        raise _invalid("timezone", rules.TIMEZONE_RULE + " (this one is unknown to ClickHouse)")
    return timezone


# What the checks above enforce, as JSON Schema: trimmed names of 2-60 characters and labels of
# 1-60 (no control characters, not only invisible ones), and the IANA zones by name.


def document_project_fields(components: dict[str, Schema]) -> None:
    """Add the name and label patterns and the zone list to the bodies' OpenAPI schemas."""
    zones = sorted(rules.iana_zones())
    for body in ("CreateProject", "UpdateProject", "CreateKey"):
        schema = components.get(body)
        if schema is None or not schema.properties:
            continue
        for field, change in (
            ("name", {"pattern": rules.NAME_PATTERN}),
            ("label", {"pattern": rules.LABEL_PATTERN}),
            ("timezone", {"enum": zones}),
        ):
            for target in _string_schemas(schema.properties.get(field)):
                for attr, value in change.items():
                    setattr(target, attr, value)


def _string_schemas(schema: Any) -> list[Schema]:
    if not isinstance(schema, Schema):
        return []
    if schema.type == OpenAPIType.STRING:
        return [schema]
    return [s for option in schema.one_of or schema.any_of or [] for s in _string_schemas(option)]
