"""setuptools finds the packages itself: every folder with an __init__.py under the top-level
folders that pyproject.toml's [tool.setuptools.package-dir] maps to tmqgate.* (protocol/ is
tmqgate.protocol, broker/cluster/ is tmqgate.broker.cluster, ...), so a new subpackage cannot be
left out of a wheel by a list that forgot it. Everything else about the build is in pyproject.toml."""

import tomllib

from setuptools import find_packages, setup

with open("pyproject.toml", "rb") as f:
    PACKAGE_DIR = tomllib.load(f)["tool"]["setuptools"]["package-dir"]

setup(packages=[name + sub[len(folder):]
                for name, folder in PACKAGE_DIR.items()
                for sub in find_packages(where=".", include=[folder, f"{folder}.*"])])
