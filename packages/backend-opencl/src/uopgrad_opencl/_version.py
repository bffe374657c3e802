"""The version of uopgrad_opencl, written only here (pyproject.toml reads it).

It moves with uopgrad's: core and its backends are released with one version, and each needs core of
its minor version (`uopgrad~=X.Y.0` in pyproject.toml)."""

__version__ = "0.1.0"
