"""Build step for the optional C accelerator (``laraq._speedups``); everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and laraq uses its pure-Python codec.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("laraq._speedups", ["laraq/_speedups.c", "laraq/_lines.c"], optional=True)])
