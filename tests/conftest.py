"""Shared fixtures. Everything here is real: SQLite files, virtual
environments, kernels, a Jupyter server (pytest-jupyter)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).parent))

from helpers import write_notebook  # noqa: E402

from jupyter_nbvalidation.backends.local import LocalBackend  # noqa: E402
from jupyter_nbvalidation.engine import Engine  # noqa: E402
from jupyter_nbvalidation.service import JobService  # noqa: E402

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture
def jp_server_config(tmp_path):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_nbvalidation": True},
                      "allow_unauthenticated_access": False},
        "LocalBackend": {"data_dir": str(tmp_path / "nbv-data")},
    }


@pytest.fixture
def jp_serverapp(jp_serverapp, jp_asyncio_loop):
    """pytest-jupyter starts the app without running the post-start hook
    (which ``jupyter server`` runs once its loop is up); run it, so the
    extension's reconcile loop starts exactly as in production."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


class Local(SimpleNamespace):
    """An engine + local backend + service in a temp dir (no HTTP)."""

    async def submit(self, **spec):
        return await self.service.submit(spec)

    async def run(self, timeout: float = 240, **spec) -> dict:
        job = await self.submit(**spec)
        done = await self.engine.wait_for_terminal(job["metadata"]["name"], timeout)
        await self.engine.recorder.flush()
        return done

    async def events(self, job: dict) -> list[dict]:
        await self.engine.recorder.flush()
        return await self.backend.store.list_events(job)


def make_local(tmp_path: Path, store_wrapper=None, **engine_kw) -> Local:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    backend = LocalBackend(data_dir=str(tmp_path / "data"))
    if store_wrapper is not None:
        backend.store = store_wrapper(backend.store)
    engine = Engine(backend, log=logging.getLogger("nbvalidation.test"), **engine_kw)
    service = JobService(engine, backend, str(root))
    return Local(engine=engine, backend=backend, service=service, root=root, store=backend.store)


@pytest_asyncio.fixture
async def local(tmp_path):
    env = make_local(tmp_path)
    await env.engine.start()
    yield env
    await env.engine.stop()


@pytest.fixture
def notebook(tmp_path):
    """notebook("dir/nb.ipynb", ["print(1)", ...]) -> relative path under the test root."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)

    def make(rel: str, sources: list[str], **kw) -> str:
        write_notebook(root / rel, sources, **kw)
        return rel

    return make
