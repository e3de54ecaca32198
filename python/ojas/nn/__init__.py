"""ojas.nn: modules (Module, Linear, Embedding, LayerNorm, RMSNorm,
Dropout, activations, MLP, Sequential, Conv2d, BatchNorm2d,
MultiheadAttention) and ojas.nn.functional."""
from ojas.nn import functional, utils  # noqa: F401
from ojas.nn.modules import (Parameter, Module, Linear, Embedding, LayerNorm, RMSNorm,  # noqa: F401
                             Dropout, ReLU, GELU, SiLU, Sigmoid, Tanh, Mish, Sequential, MLP,
                             Conv2d, BatchNorm2d, MultiheadAttention)
