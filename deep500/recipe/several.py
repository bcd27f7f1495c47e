"""One recipe entry that stands for several alternatives."""


class Several(tuple):
    """What a component's validator returns when one entry stands for several
    alternatives (an operator entry with ``rows:``, ``deep500.recipe.operator_rows``):
    the recipe takes each as an alternative of its own, in order, all located at that
    entry's key path. Only ``mutable`` lists take it; a ``fixed`` value is one value."""
