"""The package's import directions (docs/ARCHITECTURE.md, "Layers"): a module may import its own
package and packages of lower layers only. Every import counts, including those inside functions
and under TYPE_CHECKING, so no layer can lean on a higher one by importing late."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "embodied_rl"

#: Lowest first. Top-level modules are named without `.py`; `__init__` is the package root.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_compat", "errors", "types", "rollout_batch"),
    ("__init__", "registry", "plugins", "process_env", "heap", "timing", "moments", "fact_cache"),
    ("distributed",),
    ("config",),
    ("algorithms", "envs", "evaluation", "health", "memory", "sinks"),
    ("models",),
    ("demos",),
    ("workers",),
    ("runtime",),
    ("configure", "config_docs", "review"),
    ("replay",),
    ("cli",),
)


def layer_of(unit: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int:
    for i, names in enumerate(layers):
        if unit in names:
            return i
    raise KeyError(f"embodied_rl.{unit} has no layer: add it to LAYERS here and to docs/ARCHITECTURE.md")


def _unit(module: str) -> str:
    """'embodied_rl.workers.actor.fsdp' -> 'workers'; 'embodied_rl' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of the package in one file."""
    here = _module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            # `from embodied_rl import config` imports the subpackage, not the root.
            if target == root.name:
                out += [(node.lineno, f"{root.name}.{a.name}") for a in node.names
                        if (root / a.name).is_dir() or (root / f"{a.name}.py").is_file()]
    return [(line, m) for line, m in out if m == root.name or m.startswith(root.name + ".")]


def violations(root: Path, layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        source = _unit(_module_name(path, root))
        for line, target in imported_modules(path, root):
            dest = _unit(target)
            if dest == source or (target == root.name and source != "__init__"):
                continue
            if layer_of(dest, layers) >= layer_of(source, layers):
                found.append(f"{path.relative_to(root.parent)}:{line} imports {target}: "
                             f"{source} (layer {layer_of(source, layers)}) may import only lower layers, "
                             f"{dest} is layer {layer_of(dest, layers)}")
    return found


def test_every_import_points_down():
    assert violations(PACKAGE) == []


def test_every_package_and_top_level_module_has_a_layer():
    units = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    for unit in units:
        layer_of(unit)


def test_a_deliberate_violation_is_reported(tmp_path):
    pkg = tmp_path / "embodied_rl"
    for sub in ("config", "workers"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "workers" / "w.py").write_text("from embodied_rl.config import schema\n")
    # A late import inside a function counts like a top-level one.
    (pkg / "config" / "c.py").write_text("def f():\n    from embodied_rl.workers import w\n")
    found = violations(pkg)
    assert len(found) == 1 and found[0].startswith("embodied_rl/config/c.py:2 imports embodied_rl.workers")
    (pkg / "config" / "rel.py").write_text("from ..workers import w\n")
    assert any("config/rel.py:1 imports embodied_rl.workers" in v for v in violations(pkg))


def test_an_unknown_package_needs_a_layer(tmp_path):
    pkg = tmp_path / "embodied_rl"
    (pkg / "newthing").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "newthing" / "__init__.py").write_text("from embodied_rl import errors\n")
    with pytest.raises(KeyError, match="newthing has no layer"):
        violations(pkg)


def test_every_path_the_architecture_doc_names_exists():
    """docs/ARCHITECTURE.md names files as `dir/file.py` (relative to embodied_rl/ or the repo)."""
    import re

    repo = PACKAGE.parent
    text = (repo / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`([\w./-]+/[\w./-]*|[\w-]+\.py)`", text))
    missing = [p for p in sorted(named) if "/" in p or p.endswith(".py")
               if not ((PACKAGE / p).exists() or (repo / p).exists() or p == "checks.py")]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


MAX_MODULE_LINES = 350


def test_no_module_is_longer_than_a_few_pages() -> None:
    """One concern per module: a file past MAX_MODULE_LINES holds more than one; split it."""
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
