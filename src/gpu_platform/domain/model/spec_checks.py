"""What every job spec must satisfy before it is accepted, whichever API it came through.

REST and gRPC both submit through `application.admission.check_input`, which calls
`check_values`; REST's schema also uses `ENV_KEY_PATTERN` so its OpenAPI says the same thing.
Each failure is an InvalidRequest naming the field:

- `command`, `env`, `cwd`, `name`, `user`: no NUL byte (execve could not pass it on);
- `env` keys: a letter or `_`, then letters, digits or `_` (`ENV_KEY_PATTERN`);
- `time_limit_s`, `retry_backoff_s`: finite numbers (no infinity, no NaN).
"""

from __future__ import annotations

import math
import re

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job import JobSpec

__all__ = ["ENV_KEY_PATTERN", "check_values", "env_key_problem"]

ENV_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_ENV_KEY = re.compile(ENV_KEY_PATTERN)


def env_key_problem(key: str) -> str | None:
    """Why `key` cannot name an environment variable, or None when it can."""
    if _ENV_KEY.fullmatch(key):
        return None
    return f"key {key!r} is not a variable name (a letter or _, then letters, digits or _)"


def check_values(spec: JobSpec) -> None:
    """Raise InvalidRequest naming the first field whose value no job can have."""
    for i, arg in enumerate(spec.command):
        if "\0" in arg:
            raise InvalidRequest("command", f"argument {i} contains a NUL byte")
    for key, value in spec.env:
        problem = env_key_problem(key)
        if problem is not None:
            raise InvalidRequest("env", problem)
        if "\0" in value:
            raise InvalidRequest("env", f"the value of {key} contains a NUL byte")
    for name in ("cwd", "name", "user"):
        value = getattr(spec, name)
        if value is not None and "\0" in value:
            raise InvalidRequest(name, "contains a NUL byte")
    for name in ("time_limit_s", "retry_backoff_s"):
        number = getattr(spec, name)
        if number is not None and not math.isfinite(number):
            raise InvalidRequest(name, f"must be a finite number of seconds, got {number}")
