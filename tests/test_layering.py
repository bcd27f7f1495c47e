"""The levels are layered (DESIGN.md): a level may use the levels below it and
``deep500.utils``, never the frameworks, the datasets, the recipes or the report; levels
0 and 1 know no framework by name; ``deep500.datasets`` builds on level 2 and level 2
never imports it back. Every import of every module is read from its source (``ast``),
the ones inside functions included, so a deferred import cannot hide an edge."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "deep500"
LEVELS = ("lv0_operators", "lv1_network", "lv2_training", "lv3_distributed")
RUNNER_SIDE = ("deep500.frameworks", "deep500.report", "deep500.recipe", "deep500.datasets",
               "deep500.conformance")
# Third-party frameworks that levels 0 and 1 must not import by name.
FRAMEWORK_MODULES = ("torch", "tensorflow", "keras", "onnxruntime", "jax")


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path, module: str | None = None) -> list[tuple[int, str]]:
    """``(line, imported module)`` of every import statement in the file (``module``:
    its dotted name, by default from its place in the package); a relative import is
    resolved against the file's package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = (module or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package[:len(package) - node.level + 1]
                base = ".".join(kept + ([base] if base else []))
            found.append((node.lineno, base))
            # ``from deep500 import datasets`` imports deep500.datasets
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def modules(*subpackages: str) -> list[pathlib.Path]:
    return sorted(p for sub in subpackages for p in (PACKAGE / sub).rglob("*.py"))


def violations(files, forbidden) -> list[str]:
    return [f"{module_name(path)} (line {line}) imports {name}"
            for path in files for line, name in imports(path) if within(name, forbidden)]


def test_the_parser_sees_deferred_and_relative_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import numpy as np\n\n\ndef f():\n"
                      "    from deep500.frameworks import registry\n\n\n"
                      "def g():\n    from ..report import plots\n    from . import network\n")
    found = imports(sample, "deep500.lv1_network.sample")
    assert (5, "deep500.frameworks") in found
    assert (9, "deep500.report") in found and (9, "deep500.report.plots") in found
    assert (10, "deep500.lv1_network.network") in found
    assert violations_of(found, RUNNER_SIDE) == ["deep500.frameworks",
                                                 "deep500.frameworks.registry",
                                                 "deep500.report", "deep500.report.plots"]


def violations_of(found, forbidden) -> list[str]:
    return [name for _, name in found if within(name, forbidden)]


@pytest.mark.parametrize("level", LEVELS)
def test_levels_import_no_framework_report_recipe_or_datasets(level):
    found = violations(modules(level), RUNNER_SIDE)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("level", LEVELS[:2])
def test_levels_0_and_1_name_no_framework(level):
    found = violations(modules(level), FRAMEWORK_MODULES)
    assert not found, "\n".join(found)


def test_no_cycle_between_datasets_and_level_2():
    backwards = violations(modules("lv2_training"), ("deep500.datasets",))
    assert not backwards, ("deep500.datasets builds on level 2, which must not import it:\n"
                           + "\n".join(backwards))


@pytest.mark.parametrize("lower,upper", [(LEVELS[i], LEVELS[j]) for i in range(4)
                                         for j in range(i + 1, 4)])
def test_a_level_uses_only_the_levels_below_it(lower, upper):
    found = violations(modules(lower), (f"deep500.{upper}",))
    assert not found, "\n".join(found)


# A framework may reuse another's custom-operator machinery (TensorFlow runs a Python
# custom operator's reference form), never its operators: ONNX semantics shared by
# executors live in deep500.utils.onnx_interop (window geometry, Resize plans,
# recurrent activations), below every framework.
FRAMEWORKS = ("reference", "pytorch", "tensorflow", "onnxruntime")
SHARED_BETWEEN_FRAMEWORKS = ("deep500.frameworks.reference.custom_ops",)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_framework_uses_no_other_frameworks_operators(framework):
    others = tuple(f"deep500.frameworks.{other}" for other in FRAMEWORKS
                   if other != framework)
    found = [f"{module_name(path)} (line {line}) imports {name}"
             for path in modules(f"frameworks/{framework}")
             for line, name in imports(path)
             if within(name, others) and not within(name, SHARED_BETWEEN_FRAMEWORKS)]
    assert not found, "\n".join(found)


# -- the whole package: the level order of DESIGN.md and no import cycle --------------
# Import order, lowest first (DESIGN.md, "Where the pieces live"); a module may import
# from its own rank or below. deep500/__init__.py and __main__.py are the top.
LEVEL_ORDER = (("utils",), ("lv0_operators",), ("lv1_network", "networks"),
               ("lv2_training", "datasets"), ("lv3_distributed",), ("frameworks",),
               ("conformance", "results"), ("store", "report"), ("recipe",), ("cli",))
RANK = {name: rank for rank, names in enumerate(LEVEL_ORDER) for name in names}


def module_files() -> dict[str, pathlib.Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def import_graph() -> dict[str, dict[str, int]]:
    """``{module: {imported module: line}}`` over ``deep500``: every import statement,
    deferred ones included, resolved to the module file it names (``from a import b``
    names ``a.b`` where that is a module, else ``a``)."""
    files = module_files()

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges = graph.setdefault(module, {})
        found = imports(path, module)
        named = {name for _, name in found}
        for line, name in found:
            if not name.startswith("deep500"):
                continue
            # ``from a import b``: imports reports both a and a.b; a.b wins when it is a
            # module, so a package's __init__ is not counted for every submodule.
            if name not in files and name.rpartition(".")[0] in named and \
                    resolve(name) == name.rpartition(".")[0]:
                target = name.rpartition(".")[0]
            else:
                target = resolve(name)
            if target is None or target == module:
                continue
            if any(other.startswith(name + ".") and other in files for other in named):
                continue   # the package named only as the base of ``from a import b``
            edges.setdefault(target, line)
    return graph


def rank_of(module: str) -> int | None:
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None


def test_every_subpackage_has_a_place_in_the_level_order():
    top = {path.name if path.is_dir() else path.stem for path in PACKAGE.iterdir()
           if (path.is_dir() and (path / "__init__.py").exists()) or path.suffix == ".py"}
    unplaced = sorted(top - set(RANK) - {"__init__", "__main__"})
    assert not unplaced, (f"add {unplaced} to LEVEL_ORDER here and to DESIGN.md's import "
                          f"order")


def test_no_import_points_up_the_level_order():
    upward = [f"{module} (line {line}) imports {target}"
              for module, edges in import_graph().items()
              for target, line in edges.items()
              if rank_of(module) is not None and rank_of(target) is not None
              and rank_of(target) > rank_of(module)]
    assert not upward, "imports against the level order of DESIGN.md:\n" + "\n".join(upward)


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module."""
    import networkx as nx
    digraph = nx.DiGraph((module, target) for module, edges in graph.items()
                         for target in edges)
    return sorted(sorted(c) for c in nx.strongly_connected_components(digraph) if len(c) > 1)


def test_no_two_modules_import_each_other():
    graph = import_graph()
    cycles = strongly_connected(graph)
    shown = []
    for component in cycles:
        inside = set(component)
        shown.append(" ; ".join(f"{m} -> {t} (line {line})" for m in component
                                for t, line in graph[m].items() if t in inside))
    assert not cycles, "import cycles:\n" + "\n".join(shown)


def test_the_cycle_finder_sees_a_deferred_cycle():
    graph = {"deep500.a": {"deep500.b": 3}, "deep500.b": {"deep500.a": 9},
             "deep500.c": {"deep500.a": 1}}
    assert strongly_connected(graph) == [["deep500.a", "deep500.b"]]
