"""What every framework bridge needs alike, written once: node errors, the inner
networks of control-flow bodies, native-operator test wrappers, optimizer wrappers over a
framework's native optimizer class, and the loading of a bridge's C++ glue.

A module here imports no framework: a bridge hands it what differs (its tensor
conversion, its native class, its network factory) and keeps only that.
"""
