"""The PyTorch visitor's operators, one module per operator family
(``deep500/frameworks/families.py``), under the same file names as every other bridge's
``ops/``: ``ops/<family>.py`` holds one mixin class with that family's ``visit_<op>``
methods, which :class:`deep500.frameworks.pytorch.visitor.PyTorchVisitor` composes.
Private ``_*.py`` modules hold helpers that several families share.
"""
