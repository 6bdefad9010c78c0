"""What makes the image buildable where no registry answers and small (hack/image.sh builds it for real:
see its header; it needs a Docker daemon, so it is not part of the test run)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()
#: Distribution name -> module name, where they differ.
_MODULE_OF = {"pyyaml": "yaml", "prometheus-client": "prometheus_client"}


def _stages() -> list[str]:
    return re.split(r"^FROM ", DOCKERFILE, flags=re.M)[1:]


def test_dockerfile_pulls_no_frontend_image() -> None:
    """A `# syntax=` line makes BuildKit pull a frontend image from a registry before anything else."""
    assert not re.search(r"^#\s*syntax\s*=", DOCKERFILE, re.M | re.I)


def test_dockerfile_keeps_its_public_default_base() -> None:
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", DOCKERFILE, re.M)
    assert all(stage.startswith("${PYTHON_IMAGE}") for stage in _stages())


def test_final_stage_installs_into_a_venv_so_a_debian_python_base_works() -> None:
    """Debian's python3 is externally managed (PEP 668): `pip install` into it is refused, and its pip
    cannot be uninstalled; a venv works on python:3.11-slim and on a base made from Debian's packages."""
    final = _stages()[-1]
    assert "python3 -m venv /opt/vkbridge" in final
    assert re.search(r"/opt/vkbridge/bin/pip install [^\n]*--no-index", final)
    commands = re.findall(r"(?:^RUN|&&)\s+(?:--mount=\S+\s+\\?\s*)?(\S+)", final, re.M)
    assert commands and not {"pip", "python"} & set(commands), "Debian's base has python3, not python/pip"
    assert "ln -s /opt/vkbridge/bin/vkbridge /usr/bin/virtual-kubelet" in final
    assert re.search(r"^ENV [^\n]*\n?(?:.*\n)*?\s*PATH=/opt/vkbridge/bin:", final, re.M)


def test_final_stage_labels_its_real_base() -> None:
    """A global ARG is empty inside a stage unless declared there again (the label read "")."""
    assert re.search(r"^ARG PYTHON_IMAGE$", _stages()[-1], re.M)


def test_dependency_layer_is_cached_apart_from_the_source() -> None:
    builder = _stages()[0]
    deps = builder.index(
        "pip wheel --wheel-dir /wheels --prefer-binary --require-hashes -r requirements/image.txt"
    )
    assert builder.index("COPY vkbridge/") > deps and "--no-deps" in builder[deps:]
    assert builder.index("COPY requirements/image.txt") < deps < builder.index("COPY pyproject.toml")


def _pins() -> dict[str, tuple[str, list[str]]]:
    """requirements/image.txt: name -> (version, sha256 hashes)."""
    text = (REPO / "requirements" / "image.txt").read_text().replace("\\\n", " ")
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        if m := re.match(r"^([A-Za-z0-9._-]+)==(\S+)\s+(.*)$", line):
            pins[m[1].lower().replace("_", "-")] = (m[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", m[3]))
    return pins


def test_every_runtime_dependency_is_pinned_with_hashes_in_the_image_lock() -> None:
    """Issue 36 point 8: the image installs exactly the reviewed versions, each file checked by hash."""
    from packaging.requirements import Requirement

    pins = _pins()
    assert pins, "requirements/image.txt pins nothing"
    assert all(hashes for _, hashes in pins.values()), [n for n, (_, h) in pins.items() if not h]
    for dep in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(dep)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is a dependency but requirements/image.txt does not pin it"
        assert req.specifier.contains(pins[name][0]), f"{name}=={pins[name][0]} does not satisfy {dep}"


def test_the_build_context_holds_the_lock_and_the_license() -> None:
    allowed = (REPO / ".dockerignore").read_text().splitlines()
    assert "!requirements/image.txt" in allowed and "!LICENSE" in allowed
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == {
        "text": "Apache-2.0"
    }


def _imported_top_level() -> set[str]:
    names: set[str] = set()
    for d in ("vkbridge", "reflectors"):
        for path in (REPO / d).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module.split(".")[0])
    return names


def test_every_runtime_dependency_is_imported() -> None:
    """The image installs the runtime dependencies: one the code never imports is dead weight
    (kubernetes_asyncio was: 48 MB of the 84 MB vkbridge added to its base)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    imported = _imported_top_level()
    unused = []
    for dep in deps:
        dist = re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower()
        if _MODULE_OF.get(dist, dist.replace("-", "_")) not in imported:
            unused.append(dist)
    assert not unused, f"runtime dependencies nothing in vkbridge/ or reflectors/ imports: {unused}"
