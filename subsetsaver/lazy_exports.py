"""Names a package re-exports, loaded from their modules on first use, so that importing the
package costs only what the caller uses (every command line run imports ``subsetsaver``).

A package lists each name with the module it comes from; :func:`exports` gives the package's
``__getattr__`` and ``__dir__``. A name may be a module's own name too (``catalog.dataflow``
is the function ``dataflow`` of the module ``catalog/dataflow.py``): importing that module
later leaves the package's name on the function, as an eager ``from .dataflow import dataflow``
in the package would. So ``from . import dataflow`` gives the function: a module that wants such a
module imports its names (``from .dataflow import Dataflow``).

Example::

    __getattr__, __dir__ = lazy_exports.exports(__name__, {
        **lazy_exports.names(".writer", "BundleWriter", "write"),
        "dtypes": (".dtypes", None),  # the module itself
    })
"""

from __future__ import annotations

import importlib
import sys
import types


def names(module, *attributes) -> dict:
    """``{attribute: (module, attribute)}`` for :func:`exports`: names that ``module`` (relative, ``.writer``) defines."""
    return {attribute: (module, attribute) for attribute in attributes}


def load(package, module, attribute=None):
    """``attribute`` of ``module`` (relative to ``package``; None: the module itself), imported now: for a
    table whose entries load when first used (the storage backends by URL scheme)."""
    loaded = importlib.import_module(module, package)
    return loaded if attribute is None else getattr(loaded, attribute)


def exports(package, table):
    """``(__getattr__, __dir__)`` for the package named ``package``: ``table`` maps each exported
    name to ``(module, attribute)`` (attribute None: the module itself), imported on first use
    and kept in the package's namespace."""
    namespace = vars(sys.modules[package])

    def __getattr__(name):
        if name not in table:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = load(package, *table[name])
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(table))

    shadowed = {name for name, (module, attribute) in table.items() if attribute is not None and module == f".{name}"}
    if shadowed:
        sys.modules[package].__class__ = _keeping(frozenset(shadowed))
    return __getattr__, __dir__


def _keeping(shadowed):
    """A module class whose names ``shadowed`` stay what the package exports when the import
    system binds the submodule of the same name to the package."""

    class Package(types.ModuleType):
        def __setattr__(self, name, value):
            if name in shadowed and isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
                return
            super().__setattr__(name, value)

    return Package
