"""The installed ez-robot's version, in a module of its own: the modules that record it
(checkpoints, bundle manifests) read it here rather than through the package's API."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ez-robot")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
