"""Every Settings field a flag fills is used by the product, or its flag is logged as ignored.

The rule (static, over the source text): a field counts as read when a ``.py`` file under ``vkbridge/`` or
``reflectors/``, other than ``vkbridge/settings.py`` itself, contains ``settings.<field>`` or ``s.<field>``
as whole words (so ``self.settings.<field>`` and ``self.s.<field>`` count too): the names the product
gives a Settings object. A field filled by a flag must be read, or each of its flags must be in
``UNIMPLEMENTED_FLAGS``, which the start-up names as ignored; a read field's flag must not be there (it
would call a flag that works "ignored"). Fields not filled by a flag (environment, parse outcome) must be
read or listed below with the reason.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from vkbridge.cli import FLAGS, UNIMPLEMENTED_FLAGS
from vkbridge.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SOURCES = [
    path
    for top in ("vkbridge", "reflectors")
    for path in sorted((REPO / top).rglob("*.py"))
    if path != REPO / "vkbridge" / "settings.py"
]

#: Fields no flag fills that nothing reads, and why that is fine.
UNREAD_NOT_FLAGS = {
    "pod_namespace": "$POD_NAMESPACE: Liqo runs the pod in the tenant namespace, which is what vkbridge uses",
}


#: Fields only `vkbridge doctor` reads: `vkbridge run` still ignores their flags (and says so at start).
DOCTOR_ONLY = {
    "liqo_namespace": "doctor checks the pods of Liqo's namespace (GUIDE §7.1); run reads nothing there"
}


def read_fields(sources: list[Path] | None = None) -> set[str]:
    names = {f.name for f in fields(Settings)}
    found: set[str] = set()
    for path in SOURCES if sources is None else sources:
        found.update(re.findall(r"\b(?:settings|s)\.([a-z_][a-z0-9_]*)\b", path.read_text()))
    return found & names


def test_doctor_only_fields_are_read_by_doctor_and_nothing_else() -> None:
    doctor = REPO / "vkbridge" / "doctor.py"
    assert set(DOCTOR_ONLY) <= read_fields([doctor])
    assert not set(DOCTOR_ONLY) & read_fields([p for p in SOURCES if p != doctor])


def test_the_rule_sees_reads_through_each_name_the_product_uses() -> None:
    read = read_fields()
    # `settings.home_kubeconfig` (app, doctor), `s.nodename` (app), `self.settings.vk_lease_enabled` (app),
    # `settings.verbosity` (cli.main).
    assert {"home_kubeconfig", "nodename", "vk_lease_enabled", "verbosity"} <= read


def test_every_flag_filled_field_is_read_or_its_flags_warn() -> None:
    read = read_fields()
    flags_of: dict[str, list[str]] = {}
    for spec in FLAGS:
        if spec.dest:
            flags_of.setdefault(spec.dest, []).append(spec.name)
    silent = sorted(
        f"{dest} (--{', --'.join(names)})"
        for dest, names in flags_of.items()
        if dest not in read and not all(name in UNIMPLEMENTED_FLAGS for name in names)
    )
    assert not silent, f"parsed, never read and not in UNIMPLEMENTED_FLAGS: {silent}"
    working = sorted(
        name
        for dest, names in flags_of.items()
        if dest in read and dest not in DOCTOR_ONLY
        for name in names
        if name in UNIMPLEMENTED_FLAGS
    )
    assert not working, f"read by the product but warned about as ignored: {working}"


def test_fields_no_flag_fills_are_read_or_explained() -> None:
    read = read_fields()
    from_flags = {spec.dest for spec in FLAGS if spec.dest}
    others = {f.name for f in fields(Settings)} - from_flags
    assert sorted(others - read) == sorted(UNREAD_NOT_FLAGS)
