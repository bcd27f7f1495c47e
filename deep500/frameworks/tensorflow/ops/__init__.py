"""The TensorFlow visitor's operators, one module per operator family
(``deep500/frameworks/families.py``): ``ops/<family>.py`` holds that family's
``visit_<op>`` methods in one mixin class, under the same file name as in every other
bridge. Private ``_*.py`` modules hold what several families share.
"""
