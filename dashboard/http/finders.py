"""Serve JavaScript that a Python package ships as if it were one of our static files.

plotly.js comes inside the plotly package (plotly/package_data/plotly.min.js); this finder maps
it to `vendor/plotly.min.js`, so collectstatic and WhiteNoise serve it locally, never from a CDN.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

# static path -> (package, file inside the installed package)
PACKAGE_ASSETS = {
    "vendor/plotly.min.js": ("plotly", "package_data/plotly.min.js"),
}


def _package_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package} is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / relative


class PackageAssetFinder(BaseFinder):
    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path not in PACKAGE_ASSETS:
            # [] either way, as Django's finders answer: django.contrib.staticfiles.finders.find
            # would return a None from here wrapped in a list, as if it were a match.
            return []
        found = str(_package_file(*PACKAGE_ASSETS[path]))
        return [found] if find_all else found

    def list(self, ignore_patterns):
        for static_path, (package, relative) in PACKAGE_ASSETS.items():
            source = _package_file(package, relative)
            storage = FileSystemStorage(location=str(source.parent))
            storage.prefix = str(Path(static_path).parent)
            yield source.name, storage
