"""The unsupported-operator error learns who supports an operator from a table handed to
``deep500.utils.onnx_interop.support`` (the framework registry registers its own when
imported), never by importing the frameworks."""
import pytest

from deep500.utils.onnx_interop import support


class _Op:
    def __init__(self, name, op_type, domain="", since_version=1):
        self.name, self.op_type, self.domain, self.since_version = (
            name, op_type, domain, since_version)


@pytest.fixture
def table():
    """A support table recording its calls; the registered one is restored after."""
    calls = []

    def lookup(op_type, domain, exclude):
        calls.append((op_type, domain, exclude))
        return (["alpha"], {"beta": "not installed"}) if op_type == "Frob" else ([], {})
    saved = support._support_table
    support.register_support_table(lookup)
    yield calls
    support.register_support_table(saved)


def test_the_registered_table_names_the_supporters(table):
    message = str(support.unsupported_operators_error(
        "X", [_Op("a", "Frob", "my.ops"), _Op("b", "Mod", "", 13)], exclude="x"))
    assert "node 'a'; supported by alpha (not checked: beta, not installed)" in message
    assert "node 'b'; supported by no other registered executor" in message
    assert table == [("Frob", "my.ops", "x"), ("Mod", "", "x")]


def test_without_a_table_the_supporters_are_left_out(table):
    support.register_support_table(None)
    message = str(support.unsupported_operators_error("X", [_Op("a", "Frob")], exclude="x"))
    assert message.endswith("used by node 'a'. Run the model on an executor that "
                            "supports it, or re-export it without this operator")
    assert "supported by" not in message and table == []


def test_the_framework_registry_hands_over_its_table():
    from deep500.frameworks import registry
    supported, unchecked = support._support_table("Relu", "", "reference")
    expected = registry.supporters("Relu", "", [n for n in registry.FRAMEWORKS
                                                if n != "reference"])
    assert (supported, unchecked) == expected
    assert "reference" not in supported and "reference" not in unchecked
