"""Deprecated name of kiln.triton.warm (and kiln.triton.record, the records it replays): importing
it warns once and gives a module with both's names."""
import warnings

from .triton.record import *  # noqa: F401,F403
from .triton.record import _SCHEMA  # noqa: F401
from .triton.warm import *  # noqa: F401,F403
from .triton.warm import main, replay, driver_target, parse_target  # noqa: F401

warnings.warn("kiln.triton_warm is now kiln.triton.warm (replay) and kiln.triton.record (the records)",
              DeprecationWarning, stacklevel=2)
