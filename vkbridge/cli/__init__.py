"""Command line: Liqo's virtual-kubelet flags (LIQO §9) to `Settings`; `vkbridge [run] | doctor | version`.

Liqo's controller-manager starts our image with the argument vector it builds for its own virtual kubelet,
so every v1.2 flag is accepted with pflag's syntax: ``--flag=value`` or ``--flag value``; booleans as
``--flag`` or ``--flag=true|false`` (``--flag false`` is refused: pflag would read it as ``--flag`` plus a
stray word); repeated flags: the last wins, lists append, maps merge; Go durations and numbers.
Flags we do not implement are accepted (IGNORED_FLAGS): one INFO line names them, a WARNING comes only
where a value asks for what vkbridge does not do or the flag is of a newer Liqo release; a flag of no
Liqo release exits 2. Any bad value exits 2 with one line:
``vkbridge: invalid value "<v>" for flag --<name>: <what is wrong>`` (a JSON log line under
``--logging-format=json``).

Environment (downward API, as Liqo's Deployment sets it): ``KUBECONFIG`` is the default of
--home-kubeconfig, ``POD_IP`` the default of --node-ip, ``POD_NAME`` the leader-election identity,
``POD_NAMESPACE`` and ``VIRTUALNODE_NAME`` locate the VirtualNode. ``VIRTUALNODE_NAME`` is *not* a default
for --nodename: Liqo always passes both with the same value and its --nodename default stays
"virtual-kubelet"; we keep that and warn when they differ.

The parts: `flags` (the flag table), `values` (one value to its typed setting), `parse` (argv and
environment to Settings, --help); here the commands.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Final

from vkbridge.cli.flags import FLAGS, FLAGS_BY_NAME, IGNORED_FLAGS, UNIMPLEMENTED_FLAGS, FlagSpec
from vkbridge.cli.parse import (
    PROG,
    HelpRequested,
    UsageError,
    build_parser,
    ignored_flags_line,
    parse_args,
    requested_log_format,
)
from vkbridge.logs import get_logger, setup_logging
from vkbridge.settings import Settings

__all__ = [
    "FLAGS",
    "FLAGS_BY_NAME",
    "IGNORED_FLAGS",
    "UNIMPLEMENTED_FLAGS",
    "VERSION_FLAGS",
    "FlagSpec",
    "UsageError",
    "build_parser",
    "main",
    "parse_args",
]

log = get_logger("vkbridge.cli")
_COMMANDS: Final = ("run", "doctor", "version")
VERSION_FLAGS: Final = ("--output", "-o")  # of `vkbridge version` only


def _version_command(args: Sequence[str]) -> int:
    """`vkbridge version [--output=json]`: one line, or one JSON object (version, revision, Python)."""
    from vkbridge.buildinfo import build_info

    output = "text"
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("-o", "--output") and rest:
            output = rest.pop(0)
        elif arg.startswith("--output=") or (arg.startswith("-o") and len(arg) > 2):
            output = arg.split("=", 1)[1] if arg.startswith("--output=") else arg[2:].lstrip("=")
        else:
            raise UsageError(f"unexpected argument {json.dumps(arg)}")
    if output not in ("text", "json"):
        raise UsageError(f'invalid argument {json.dumps(output)} for "--output": text or json')
    info = build_info()
    sys.stdout.write((json.dumps(info.as_dict()) if output == "json" else info.line()) + "\n")
    return 0


def _run(command: str, settings: Settings) -> int:
    """Imported here, not at the top, so --help and `version` start without the runtime (aiohttp...)."""
    if command == "doctor":
        from vkbridge import doctor

        return doctor.run(settings)
    from vkbridge import app

    return app.run(settings)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vkbridge` script and `python -m vkbridge`: returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = "run"
    if args and args[0] in _COMMANDS:
        command, args = args[0], args[1:]
    elif args and args[0] == "--version":
        command, args = "version", args[1:]
    try:
        if command == "version":
            return _version_command(args)
        settings = parse_args(args, command=command)
    except HelpRequested:
        sys.stdout.write(build_parser(command).format_help())
        return 0
    except UsageError as exc:
        if requested_log_format(args) == "json":
            setup_logging(0, "json")
            log.error(f"{PROG}: {exc}")
        else:
            sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    setup_logging(settings.verbosity, settings.log_format)
    if line := ignored_flags_line(settings):
        log.info(line)
    for warning in settings.warnings:
        log.warning(warning)
    return _run(command, settings)
