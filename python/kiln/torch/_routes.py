"""Turns kiln's routes for torch.compile on and off, in one place.

Three routes: Inductor's C++ builds (kiln.torch.inductor), torch.compile's own caches
(kiln.torch.compile_cache) and Triton's cache manager (kiln.triton). The public install() of
either module turns its own route on and, by default, the other's; both call here, so each
module knows only its own route and neither imports the other.
"""
import importlib.util
import logging

from . import compile_cache, inductor

_log = logging.getLogger("kiln.inductor")
_warned = False


def install(builds, caches, triton, caches_optional=False):
    """builds/caches: bool; triton: True, False, or None for "when Triton is installed".

    caches_optional (kiln.torch.inductor.install()): the builds are the point, and a torch
    without the caches' seam is said once while its kernels still go through kiln. Otherwise
    (kiln.torch.compile_cache.install()) that torch raises before anything is turned on."""
    global _warned
    from .. import KilnError

    if caches and not caches_optional:
        compile_cache.install_caches()
    if builds:
        inductor.install_builds()
    if caches and caches_optional:
        try:
            compile_cache.install_caches()
        except KilnError as e:
            if not _warned:
                _warned = True
                _log.warning("kiln.inductor: %s", e)
    if triton or (triton is None and importlib.util.find_spec("triton") is not None):
        import kiln.triton

        kiln.triton.install()


def uninstall(builds, caches):
    if builds:
        inductor.uninstall_builds()
    if caches:
        compile_cache.uninstall()
