"""The fast path for the hottest call, `gpu-platform submit [OPTIONS] [--] COMMAND...`, parsed
without typer: typer, pydantic (its coercion) and rich cost ~85% of a submit's CPU, and a
batch script calls submit thousands of times (docs/performance.md, "Beside Slurm").

It takes only the plain, unambiguous argv (the simple options with values that typer would
read the same way) and leaves everything else to typer, which then runs as before: `--help`,
`--wait`, `--array`, an unknown, repeated or abbreviated option, a value that starts with `-`,
an int or float typer might read otherwise, a bad value (typer prints the error), completion.
Once the body is built it sends it with the same client; a failure is printed by the same
`session.fail` (rich is imported then) with the same exit code.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from typing import Any

from gpu_platform.adapters.inbound.cli.submit_body import Affinity, submit_body

__all__ = ["fast_submit"]

DEFAULT_SERVER = "http://127.0.0.1:8080"  # as cli.admin.DEFAULT_SERVER
_ENV = ("GPU_PLATFORM_SERVER", "GPU_PLATFORM_TOKEN", "GPU_PLATFORM_CA_FILE")

_STR = {  # option -> submit_body keyword, string valued
    "--gpus": "gpus",
    "--gpu-memory": "gpu_memory",
    "--cpus": "cpus",
    "--vendor": "vendor",
    "--sharing": "sharing",
    "--name": "name",
    "--mig": "mig",
    "--tenant": "tenant",
    "--cwd": "cwd",
    "--image": "image",
    "--memory": "memory",
    "--time-limit": "time_limit",
    "--user": "user",
    "--server": "server",
}
_INT = {"--tasks": "tasks", "--priority": "priority", "--max-attempts": "max_attempts"}
_FLOAT = {"--retry-backoff": "retry_backoff"}
_AFFINITY = {"--nvlink": "nvlink", "--numa": "numa", "--same-rack": "same_rack"}
_LIST = {"--env": "env", "-e": "env", "--after": "after", "--gpu-model": "gpu_model"}
_LIST |= {"--mount": "mount"}
_OUTPUT = {"--output": "output", "-o": "output"}
_FLAGS = {
    "--preemptible": ("preemptible", True),
    "--no-preemptible": ("preemptible", False),
    "--quiet": ("quiet", True),
    "-q": ("quiet", True),
}
_ROOT = {"--token": "token", "--cacert": "cacert"}
_PLAIN_INT = re.compile(r"(0|[1-9][0-9]{0,8})")
_PLAIN_FLOAT = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9_.()\- ]*")  # printed by rich exactly as given


def _split(arg: str) -> tuple[str, str, str]:
    """`--opt=value` as typer reads it; a short option never takes `=`."""
    return arg.partition("=") if arg.startswith("--") else (arg, "", "")


class _Fallback(Exception):
    """Not a call this path is sure to read as typer would: let typer take it."""


def _parse(argv: list[str], env: Mapping[str, str]) -> dict[str, Any]:
    if any(env.get(name) == "" for name in _ENV) or any(k.endswith("_COMPLETE") for k in env):
        raise _Fallback
    opts: dict[str, Any] = {}
    seen: set[str] = set()
    args = iter(argv)

    def value(option: str, inline: str | None) -> str:
        if option in seen and option not in _LIST:
            raise _Fallback  # repeated: typer's rules (last wins) are not worth copying
        seen.add(option)
        text = inline if inline is not None else next(args, None)
        if text is None or text.startswith("-"):
            raise _Fallback
        return text

    for arg in args:  # root options, then `submit`
        if arg == "submit":
            break
        option, eq, inline = _split(arg)
        if option not in _ROOT:
            raise _Fallback
        opts[_ROOT[option]] = value(option, inline if eq else None)
    else:
        raise _Fallback
    command: list[str] = []
    for arg in args:
        if arg == "--":
            command = list(args)
            break
        if not arg.startswith("-") or arg == "-":
            command = [arg, *args]  # the first argument ends the options
            break
        option, eq, inline = _split(arg)
        text = inline if eq else None
        if option in _FLAGS and not eq:
            if option in seen:
                raise _Fallback
            seen.add(option)
            key, flag = _FLAGS[option]
            opts[key] = flag
        elif option in _STR:
            opts[_STR[option]] = value(option, text)
        elif option in _INT:
            number = value(option, text)
            if not _PLAIN_INT.fullmatch(number):
                raise _Fallback
            opts[_INT[option]] = int(number)
        elif option in _FLOAT:
            number = value(option, text)
            if not _PLAIN_FLOAT.fullmatch(number):
                raise _Fallback
            opts[_FLOAT[option]] = float(number)
        elif option in _AFFINITY:
            opts[_AFFINITY[option]] = Affinity(value(option, text))  # ValueError: typer's turn
        elif option in _LIST:
            opts.setdefault(_LIST[option], []).append(value(option, text))
        elif option in _OUTPUT:
            opts["output"] = value(option, text)
            if opts["output"] not in ("table", "json"):
                raise _Fallback
        else:
            raise _Fallback
    if not command or {"--preemptible", "--no-preemptible"} <= seen:
        raise _Fallback
    if {"-o", "--output"} <= seen:
        raise _Fallback
    opts["command"] = command
    return opts


def fast_submit(argv: list[str], env: Mapping[str, str]) -> int | None:
    """Run `argv` (without the program name) if it is a plain submit and return the exit
    code; None when typer should run it instead (nothing has been sent then)."""
    try:
        opts = _parse(argv, env)
        # an option given wins over its variable, even when empty (as typer reads them)
        server = opts.pop("server", env.get("GPU_PLATFORM_SERVER", DEFAULT_SERVER))
        token = opts.pop("token", env.get("GPU_PLATFORM_TOKEN"))
        cacert = opts.pop("cacert", env.get("GPU_PLATFORM_CA_FILE"))
        output = opts.pop("output", "table")
        quiet = opts.pop("quiet", False)
        body = submit_body(**opts)
    except (_Fallback, ValueError):
        return None  # typer reads it again and says what is wrong, if anything
    from gpu_platform.adapters.inbound.cli.client import ApiClient, ApiError

    try:
        job = ApiClient(server, token=token, cacert=cacert).submit(body)
    except ApiError as exc:
        from gpu_platform.adapters.inbound.cli.session import fail

        return int(fail(str(exc), exc.exit_code).exit_code)
    if output == "json":
        sys.stdout.write(json.dumps(job, indent=2) + "\n")
        return 0
    line = job["id"] if quiet else f"submitted {job['id']} ({job['state']})"
    columns = env.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else 220  # rich's width off a terminal (cli.app)
    if _PLAIN_TEXT.fullmatch(line) and len(line) < width and not sys.stdout.isatty():
        sys.stdout.write(line + "\n")
    else:  # a terminal, or anything rich might style or wrap: through rich, as typer's submit
        from gpu_platform.adapters.inbound.cli.app import console

        console().print(line)
    return 0
