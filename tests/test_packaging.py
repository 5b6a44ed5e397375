"""pyproject.toml as setuptools reads it: no deprecated field, so an install prints no warning."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

from packaging.licenses import canonicalize_license_expression
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_the_license_is_an_spdx_expression() -> None:
    """``license = { text = ... }`` is deprecated (setuptools warns on every install, and
    drops it on 2027-02-18): the license is an SPDX string (issue 30, item 4)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert isinstance(project["license"], str)
    assert canonicalize_license_expression(project["license"]) == project["license"] == "MIT"


def test_setuptools_reads_the_project_without_a_warning() -> None:
    """What ``pip install`` runs: setuptools applies pyproject.toml; any warning fails."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist = apply_configuration(Distribution(), PYPROJECT)
    assert dist.metadata.license_expression == "MIT"
    assert dist.get_name() == "specnsys"
