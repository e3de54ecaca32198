"""ojas.nn: neural-network functions (ojas.nn.functional). Modules
(Linear, LayerNorm, ...) are not there yet: see docs/python.md."""
from ojas.nn import functional  # noqa: F401
