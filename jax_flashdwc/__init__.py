"""jax_flashdwc: fast depthwise 2-D convolution for JAX."""

from ._ffi import cuda_available
from .conv import depthwise_conv2d
from .conv1d import depthwise_conv1d, depthwise_conv1d_update

__version__ = "0.1.0"

__all__ = ["cuda_available", "depthwise_conv1d", "depthwise_conv1d_update", "depthwise_conv2d", "__version__"]
