"""ojas.nn.functional: the neural-network ops of include/ojas/ops.h under
torch.nn.functional's names and signatures, plus ojas's fused ops
(gelu_linear, swiglu_linear, linear_cross_entropy, add_layer_norm,
add_rms_norm, rotary_embedding, rms_norm_rotary)."""
import math

from ojas import _C
from ojas._tensor import _REDUCTION


def _red(reduction):
    try:
        return _REDUCTION[reduction]
    except KeyError:
        raise _C.InvalidArgumentError("reduction must be 'mean', 'sum' or 'none', not %r"
                                      % (reduction,)) from None


def relu(input, inplace=False):
    return _C.relu(input)


def gelu(input, approximate="none"):
    if approximate == "tanh":
        return _C.gelu_tanh(input)
    if approximate != "none":
        raise _C.InvalidArgumentError("gelu: approximate must be 'none' or 'tanh'")
    return _C.gelu(input)


def silu(input, inplace=False):
    return _C.silu(input)


def mish(input, inplace=False):
    return _C.mish(input)


def sigmoid(input):
    return _C.sigmoid(input)


def tanh(input):
    return _C.tanh(input)


def softplus(input, beta=1.0, threshold=20.0):
    return _C.softplus(input, float(beta), float(threshold))


def elu(input, alpha=1.0, inplace=False):
    return _C.elu(input, float(alpha))


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _C.leaky_relu(input, float(negative_slope))


def softmax(input, dim):
    return _C.softmax(input, dim)


def log_softmax(input, dim):
    return _C.log_softmax(input, dim)


def linear(input, weight, bias=None):
    return _C.linear(input, weight, bias)


def gelu_linear(input, weight, bias=None, approximate=True):
    """linear(gelu(input), weight, bias) keeping input, not gelu(input), for
    the backward (oj_gelu_linear)."""
    return _C.gelu_linear(input, weight, bias, approximate)


def swiglu_linear(gate, up, weight, bias=None):
    """linear(silu(gate) * up, weight, bias) (oj_swiglu_linear)."""
    return _C.swiglu_linear(gate, up, weight, bias)


def embedding(input, weight):
    return _C.embedding(weight, input)


def _over_trailing(fn, op, input, normalized_shape, params):
    """op(input, *params) normalising over the trailing dims normalized_shape
    names (torch's rule): several dims go through the op as one flattened
    last dim, the affine params reshaped to match."""
    shape = tuple(input.shape)
    if normalized_shape is None:
        normalized_shape = shape[-1:]
    ns = ((int(normalized_shape),) if isinstance(normalized_shape, int)
          else tuple(int(d) for d in normalized_shape))
    if not ns or len(ns) > len(shape) or shape[len(shape) - len(ns):] != ns:
        raise _C.ShapeError("%s: normalized_shape %s is not the trailing dims of input %s"
                            % (fn, ns, shape))
    for p in params:
        if p is not None and tuple(p.shape) != ns:
            raise _C.ShapeError("%s: weight/bias of shape %s, normalized_shape %s"
                                % (fn, tuple(p.shape), ns))
    if len(ns) == 1:
        return op(input, *params)
    n = math.prod(ns)
    flat = [None if p is None else p.reshape(n) for p in params]
    return op(input.reshape(*shape[:len(shape) - len(ns)], n), *flat).reshape(*shape)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing dims normalized_shape (oj_layer_norm)."""
    return _over_trailing("layer_norm", lambda x, w, b: _C.layer_norm(x, w, b, float(eps)),
                          input, normalized_shape, (weight, bias))


def rms_norm(input, normalized_shape=None, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing dims
    normalized_shape (None: the last dim; oj_rms_norm); eps None: float32's
    machine epsilon, as torch 2.4's rms_norm."""
    if eps is None:
        eps = 1.1920928955078125e-07
    return _over_trailing("rms_norm", lambda x, w: _C.rms_norm(x, w, float(eps)),
                          input, normalized_shape, (weight,))


def add_layer_norm(input, residual, weight=None, bias=None, eps=1e-5):
    """(layer_norm(input + residual), input + residual) fused (oj_add_layer_norm)."""
    return _C.add_layer_norm(input, residual, weight, bias, float(eps))


def add_rms_norm(input, residual, weight=None, eps=1e-6):
    """(rms_norm(input + residual), input + residual) fused (oj_add_rms_norm)."""
    return _C.add_rms_norm(input, residual, weight, float(eps))


def cross_entropy(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return _C.cross_entropy(input, target, int(ignore_index), float(label_smoothing),
                            _red(reduction))


def nll_loss(input, target, ignore_index=-100, reduction="mean"):
    return _C.nll_loss(input, target, int(ignore_index), _red(reduction))


def linear_cross_entropy(input, weight, target, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0):
    """cross_entropy(linear(input, weight), target) without the logits
    (oj_linear_cross_entropy)."""
    return _C.linear_cross_entropy(input, weight, target, int(ignore_index),
                                   float(label_smoothing), _red(reduction))


def mse_loss(input, target, reduction="mean"):
    return _C.mse_loss(input, target, _red(reduction))


def l1_loss(input, target, reduction="mean"):
    return _C.l1_loss(input, target, _red(reduction))


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    return _C.smooth_l1_loss(input, target, float(beta), _red(reduction))


def binary_cross_entropy(input, target, reduction="mean"):
    return _C.binary_cross_entropy(input, target, _red(reduction))


def binary_cross_entropy_with_logits(input, target, reduction="mean"):
    return _C.binary_cross_entropy_with_logits(input, target, _red(reduction))


def dropout(input, p=0.5, training=True, inplace=False):
    return _C.dropout(input, float(p), bool(training))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None):
    if dropout_p:
        raise _C.UnsupportedError("scaled_dot_product_attention: dropout_p > 0 is not supported")
    return _C.scaled_dot_product_attention(query, key, value, attn_mask, bool(is_causal),
                                           math.nan if scale is None else float(scale))


def rotary_embedding(input, position_offset=0, theta=10000.0):
    """Rotary position embedding, half-split layout (oj_rotary_embedding)."""
    if isinstance(position_offset, _C.TensorBase):
        return _C.rotary_embedding_at(input, position_offset, float(theta))
    return _C.rotary_embedding(input, int(position_offset), float(theta))


def rms_norm_rotary(input, weight=None, eps=1e-6, position_offset=0, theta=10000.0):
    return _C.rms_norm_rotary(input, weight, float(eps), int(position_offset), float(theta))


def pad(input, pad, mode="constant", value=0.0):
    if mode != "constant":
        raise _C.UnsupportedError("pad: only mode='constant' is supported")
    return _C.pad(input, tuple(pad), float(0.0 if value is None else value))


def one_hot(tensor, num_classes=-1):
    return _C.one_hot(tensor, int(num_classes))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    return _C.unfold(input, kernel_size, dilation, padding, stride)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _C.conv2d(input, weight, bias, stride, padding, dilation, groups)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _C.conv1d(input, weight, bias, stride, padding, dilation, groups)


def max_pool2d(input, kernel_size, stride=None, padding=0):
    return _C.max_pool2d(input, kernel_size, stride if stride else None, padding)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    if ceil_mode:
        raise _C.UnsupportedError("avg_pool2d: ceil_mode is not supported")
    return _C.avg_pool2d(input, kernel_size, stride if stride else None, padding,
                         bool(count_include_pad))


def adaptive_avg_pool2d(input, output_size):
    h, w = (output_size, output_size) if isinstance(output_size, int) else output_size
    return _C.adaptive_avg_pool2d(input, h, w)


def interpolate(input, size=None, scale_factor=None, mode="nearest"):
    if mode != "nearest":
        raise _C.UnsupportedError("interpolate: only mode='nearest' is supported")
    if size is None:
        s = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * 2
        size = (int(input.shape[-2] * s[0]), int(input.shape[-1] * s[1]))
    h, w = (size, size) if isinstance(size, int) else size
    return _C.upsample_nearest2d(input, h, w)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    return _C.batch_norm(input, running_mean, running_var, weight, bias, bool(training),
                         float(momentum), float(eps))
