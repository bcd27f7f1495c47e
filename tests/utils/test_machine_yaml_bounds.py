"""A machine file is read in bounded time and memory (deep500.utils.bounded_yaml, the
reader recipes use too): an alias bomb, an alias loop, a huge file or a key given twice
is a MachineError naming the file, in milliseconds."""

import pytest

from deep500.utils.machine import MACHINE_FILE_BOUNDS, MachineError, load_machine
from tests.yaml_bombs import alias_bomb, refused_in_time

LIMIT_S = 2.0  # generous under load; the bounded reader answers in milliseconds


def _bomb(levels: int, width: int) -> str:
    return alias_bomb(levels, width, "network: {{alpha_s: {top}}}")


def _refused(tmp_path, text: str, match: str) -> str:
    path = tmp_path / "hostile.yaml"
    message = refused_in_time(path, text, load_machine, MachineError, match, LIMIT_S,
                              digits=2)
    assert str(path) in message
    return message


@pytest.mark.parametrize("levels, width", [(9, 9), (12, 10)])
def test_a_machine_file_alias_bomb_is_a_machine_error_in_milliseconds(tmp_path, levels,
                                                                      width):
    _refused(tmp_path, _bomb(levels, width),
             rf"hostile.yaml: line \d+, column \d+: more than "
             rf"{MACHINE_FILE_BOUNDS.max_values} values, where a machine file needs a "
             rf"few hundred \(the alias \*laugh\d+ stands for \d+\)")


def test_an_alias_loop_a_huge_file_and_a_repeated_key_are_refused(tmp_path):
    _refused(tmp_path, "name: x\nnetwork: &a {b: *a}\n",
             r"line 2, column \d+: the alias \*a is inside the node &a names")
    _refused(tmp_path, "name: x\nsource: " + "x" * MACHINE_FILE_BOUNDS.max_bytes + "\n",
             r"larger than 256 KiB; a machine file is a few kilobytes")
    _refused(tmp_path, "name: x\nname: y\n", r"found key 'name' twice \(first 1:1\)")
