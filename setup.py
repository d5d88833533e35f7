"""Builds the C++ tree extension; everything else is declared in pyproject.toml."""
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

tree = Extension(
    "ez_robot.ctree._tree",
    sources=["ctree/_tree.pyx", "ctree/tree.cpp", "ctree/candidates.cpp"],
    include_dirs=["ctree", numpy.get_include()],
    language="c++",
    extra_compile_args=["-std=c++17", "-O3"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
)

setup(ext_modules=cythonize([tree], language_level=3))
