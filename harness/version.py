"""The installed package version, recorded in every record and part of every config hash."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The installed ``contrastive-harness`` version (``0+unknown`` when not installed)."""
    try:
        return version("contrastive-harness")
    except PackageNotFoundError:
        return "0+unknown"
