"""Every bridge keeps an operator family's visitors in ``ops/<family>.py``, with the same
file names in every bridge (``deep500/frameworks/families.py``); a bridge holds no file
outside the families and the shared bridge vocabulary; every operator has a family.

Read from the sources (``ast``), so a bridge need not import for this to be checked.
"""
import ast
import pathlib

import onnx.defs
import pytest

from deep500.frameworks.families import FAMILIES, family_names, family_of

FRAMEWORKS = pathlib.Path(__file__).resolve().parents[2] / "deep500" / "frameworks"
# Bridges that build networks with one visit_<op> per operator.
VISITOR_BRIDGES = ("pytorch", "tensorflow")
# The visitor protocol's hooks (deep500/utils/onnx_interop/visitor.py), not operators.
HOOKS = {"model", "graph", "initializer", "input", "output", "graph_end", "constant"}
# File names every bridge uses alike (a bridge need not have all of them).
BRIDGE_MODULES = {
    "__init__": "the bridge's public names",
    "executor": "its GraphExecutor(s)",
    "network": "its Network",
    "visitor": "its ONNX visitor: the hooks and what every family's visitors share",
    "custom_ops": "Python and C++ custom operators in the framework",
    "native_ops": "ONNX operators as single framework calls (level 0)",
    "optimizers": "the framework's optimizers behind Deep500's optimizer interface",
    "distributed": "the framework's native distributed training",
    "memory": "peak memory as the framework's own allocator reports it",
    "glue": "loading the bridge's C++ glue",
}
BRIDGE_FOLDERS = {"ops": "visitors, one file per family",
                  "operators": "reference operators, one file each",
                  "optimizers": "reference optimizers, one file each",
                  "distributed": "reference distributed optimizers, one file each",
                  "kernel": "C++ sources of a TensorFlow kernel",
                  "native": "C++ sources of the PyTorch glue"}
# What one bridge alone has, and why.
BRIDGE_OWN = {
    "pytorch": {"onnx_module": "the torch.nn.Module the visitor builds",
                "extension_dtypes": "ONNX element types torch lacks, carried in wider ones",
                "gloo_traffic": "bytes DistributedDataParallel sends, counted under gloo"},
    "tensorflow": {"tf_kernel": "building the TensorFlow kernel of a C++ operator",
                   "node_backward": "per-node backward times under a GradientTape"},
    "reference": {},
    "onnxruntime": {},
}


def visitor_methods(path: pathlib.Path) -> list[tuple[int, str]]:
    """``(line, operator)`` of every ``visit_<op>`` defined or assigned in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        else:
            continue
        found += [(node.lineno, n[len("visit_"):]) for n in names
                  if n.startswith("visit_") and n[len("visit_"):] not in HOOKS]
    return found


def test_every_onnx_operator_has_one_family():
    schemas = {s.name for s in onnx.defs.get_all_schemas_with_history() if not s.deprecated}
    listed = [op for _, ops in FAMILIES.values() for op in ops]
    assert len(listed) == len(set(listed)), "an operator is listed in two families"
    assert sorted(schemas - set(listed)) == []
    assert sorted(set(listed) - schemas) == []


def test_every_reference_operator_has_a_family():
    for path in (FRAMEWORKS / "reference" / "operators").glob("op_*.py"):
        family_of(path.stem[len("op_"):])


def test_family_names_are_module_names():
    assert all(name.isidentifier() and name == name.lower() for name in family_names())


@pytest.mark.parametrize("bridge", VISITOR_BRIDGES)
def test_visitors_live_in_their_familys_file(bridge):
    ops = FRAMEWORKS / bridge / "ops"
    assert ops.is_dir(), f"{bridge} has no ops/ folder"
    misplaced = []
    for path in sorted(ops.glob("*.py")):
        for line, op in visitor_methods(path):
            family = family_of(op)
            if path.stem != family:
                misplaced.append(f"{bridge}/ops/{path.name}:{line} visit_{op} belongs in "
                                 f"ops/{family}.py")
    assert not misplaced, "\n".join(misplaced)


@pytest.mark.parametrize("bridge", VISITOR_BRIDGES)
def test_no_visitor_outside_ops(bridge):
    outside = [f"{bridge}/{path.relative_to(FRAMEWORKS / bridge)}:{line} visit_{op}"
               for path in sorted((FRAMEWORKS / bridge).rglob("*.py"))
               if "ops" not in path.relative_to(FRAMEWORKS / bridge).parts[:-1]
               for line, op in visitor_methods(path)]
    assert not outside, "operator visitors belong in ops/<family>.py:\n" + "\n".join(outside)


@pytest.mark.parametrize("bridge", VISITOR_BRIDGES)
def test_ops_holds_only_family_files(bridge):
    allowed = set(family_names()) | {"__init__"}
    strays = [path.name for path in sorted((FRAMEWORKS / bridge / "ops").glob("*.py"))
              if path.stem not in allowed and not path.stem.startswith("_")]
    assert not strays, (f"{bridge}/ops/ holds files outside the families: {strays} "
                        f"(families: {', '.join(family_names())})")
    helpers_with_visitors = [path.name for path in (FRAMEWORKS / bridge / "ops").glob("_*.py")
                             if path.stem != "__init__" and visitor_methods(path)]
    assert not helpers_with_visitors


@pytest.mark.parametrize("bridge", sorted(BRIDGE_OWN))
def test_a_bridge_holds_no_file_outside_the_vocabulary(bridge):
    root = FRAMEWORKS / bridge
    strays = []
    for path in sorted(root.iterdir()):
        if path.name == "__pycache__":
            continue
        if path.is_dir():
            if path.name not in BRIDGE_FOLDERS:
                strays.append(path.name + "/")
        elif path.suffix == ".py" and not path.stem.startswith("_") or path.stem == "__init__":
            if path.stem not in BRIDGE_MODULES and path.stem not in BRIDGE_OWN[bridge]:
                strays.append(path.name)
    assert not strays, (f"{bridge} holds files outside the bridge vocabulary: {strays}; "
                        f"put visitors in ops/<family>.py, shared code in frameworks/_bridge/, "
                        f"or name the file in BRIDGE_OWN with its reason")



def test_family_of_takes_the_onnx_name_and_the_visitor_name():
    assert family_of("Abs") == family_of("abs") == "math"
    assert family_of("LSTM") == family_of("lstm") == "recurrent"
    with pytest.raises(Exception, match="no family"):
        family_of("NoSuchOperator")
