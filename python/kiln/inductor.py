"""Deprecated name of kiln.torch.inductor (torch.compile's C++ builds through kiln): importing it
warns once and gives that module itself, so state and patches are shared."""
import sys
import warnings

from .torch import inductor as _inductor

warnings.warn("kiln.inductor is now kiln.torch.inductor; the old name will go in a later release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _inductor
