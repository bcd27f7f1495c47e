"""A recipe mapping with some keys changed, for tests that build variants of one."""
import copy


def changed(base: dict, changes: dict) -> dict:
    """A deep copy of ``base`` with ``changes`` (``{section: {key: value}}``) applied;
    a value of None removes the key."""
    raw = copy.deepcopy(base)
    for section, values in changes.items():
        for key, value in values.items():
            if value is None:
                raw[section].pop(key, None)
            else:
                raw[section][key] = value
    return raw
