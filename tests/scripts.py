"""Load a script of the repository that is not part of the package (benchmarks/, examples/)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str, name: str | None = None):
    """The module of ``ROOT / relative_path``, executed once per call."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
