"""Keep pytest-xdist's groups (``--dist loadgroup``) with pytest >= 9.2.

xdist names a grouped test ``<node id>@<group>`` by assigning ``item._nodeid``
in its worker's ``pytest_collection_modifyitems``; pytest 9.2 reads a node's id
from the structured ``item._id``, so that name is lost and every group is split
over the workers as if it had none. This wrapper, around every implementation of
the hook (the markers of tests/conftest.py, then xdist's), carries the name over.
It does nothing where xdist's name held (older pytest) or where there is none."""

from __future__ import annotations

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    result = yield
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest < 9.2: the id is a string, and xdist's assignment holds
        return result
    for item in items:
        grouped = item.__dict__.get("_nodeid")
        if isinstance(grouped, str) and grouped != item.nodeid:
            item._id = coerce_node_id(grouped)
    return result
