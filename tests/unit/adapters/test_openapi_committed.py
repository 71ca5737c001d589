"""docs/openapi.json is the code's schema: a route or model change without `make openapi`
fails here."""

from __future__ import annotations

import json
from pathlib import Path

from gpu_platform.infrastructure.openapi import openapi_schema, render

COMMITTED = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


def test_the_committed_openapi_schema_matches_the_code() -> None:
    assert COMMITTED.read_text() == render(), "the API changed: run `make openapi` and commit"


def test_every_error_answer_is_documented_as_problem_json() -> None:
    for path, operations in openapi_schema()["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    assert list(response["content"]) == ["application/problem+json"], (
                        path,
                        method,
                        status,
                    )


def test_the_schema_declares_bearer_authentication() -> None:
    schema = json.loads(COMMITTED.read_text())
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
