"""The Jupyter server extension: configuration, lifecycle, routes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Enum, Float, Int, Type

from ._version import __version__
from .backends.base import Backend
from .engine import Engine
from .service import JobService

EVENT_SCHEMA_ID = "https://nbvalidation.dev/events/job/v1"
EVENT_SCHEMA = Path(__file__).parent / "event_schemas" / "job.v1.yaml"


def make_backend(kind: str, cls: type | None, parent: Any) -> Backend:
    if cls is not None:
        return cls(parent=parent)
    if kind == "kubernetes":
        try:
            from .k8s.backend import KubernetesBackend
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in ("kubernetes", "aiohttp", "pydantic"):
                raise
            raise RuntimeError(f"backend = 'kubernetes' needs the Kubernetes client, which is not installed "
                               f"(no module {e.name}): pip install 'jupyter-nbvalidation[kubernetes]'") from None

        return KubernetesBackend(parent=parent)
    from .backends.local import LocalBackend

    return LocalBackend(parent=parent)


class NBValidation(ExtensionApp):
    """Validate notebooks in clean environments: ``c.NBValidation.*``."""

    name = "jupyter_nbvalidation"
    version = __version__
    load_other_extensions = True

    backend = Enum(["local", "kubernetes"], default_value="local",
                   help="Where jobs are stored, built and validated.").tag(config=True)
    backend_class = Type(default_value=None, klass=Backend, allow_none=True,
                         help="A Backend subclass to use instead of the built-in one named by `backend`.").tag(config=True)
    build_timeout = Float(15 * 60, help="Default build-phase timeout in seconds "
                                        "(a job's spec.podConfig.buildConfig.timeout overrides it).").tag(config=True)
    validation_timeout = Float(30 * 60, help="Default validation-phase timeout in seconds "
                                             "(a job's spec.timeout overrides it).").tag(config=True)
    max_retries = Int(None, allow_none=True,
                      help="Retries of a build or a validation that failed because of a transient fault that is "
                           "not the notebook's (a kernel that failed to start, a deleted or evicted Pod), counted "
                           "apart for each; after the last the job ends Failed with reason InfrastructureFailed. "
                           "Default: the backend's max_retries (3).").tag(config=True)
    retry_backoff = Float(None, allow_none=True,
                          help="Seconds before the first such retry, doubling for each next one (jittered, capped "
                               "at 60 s). Default: the backend's retry_backoff (2 s).").tag(config=True)
    workers = Int(16, help="Jobs reconciled at once (one in-flight reconcile per job).").tag(config=True)
    resync_period = Float(300.0, help="Seconds between safety-net resyncs of all active jobs; "
                                      "reaction to changes is event-driven.").tag(config=True)
    max_notebook_bytes = Int(10 * 2**20, help="Largest notebook accepted at submit, in bytes.").tag(config=True)
    max_page_size = Int(500, help="Largest `limit` accepted by GET /jobs.").tag(config=True)
    max_input_files = Int(1000, help="Most files a job's spec.inputFiles may match.").tag(config=True)
    max_input_bytes = Int(50 * 2**20, help="Largest total size of a job's spec.inputFiles, in bytes.").tag(config=True)

    engine: Engine
    service: JobService

    def initialize_settings(self) -> None:
        self.backend_impl = make_backend(self.backend, self.backend_class, self)
        self.engine = Engine(self.backend_impl, log=self.log, build_timeout=self.build_timeout,
                             validation_timeout=self.validation_timeout, workers=self.workers,
                             resync_period=self.resync_period, max_retries=self.max_retries,
                             retry_backoff=self.retry_backoff)
        root = self.serverapp.root_dir if self.serverapp is not None else "."
        self.service = JobService(self.engine, self.backend_impl, root, max_notebook_bytes=self.max_notebook_bytes,
                                  max_input_files=self.max_input_files, max_input_bytes=self.max_input_bytes)
        self.settings.update({"nbvalidation_service": self.service, "nbvalidation_app": self})
        if self.serverapp is not None and getattr(self.serverapp, "event_logger", None) is not None:
            try:
                self.serverapp.event_logger.register_event_schema(EVENT_SCHEMA)
                self.engine.recorder.listeners.append(self._publish)
            except Exception as e:  # the lab falls back to polling
                self.log.warning("nbvalidation: live updates unavailable: %s", e)

    def _publish(self, event: dict, job: dict) -> None:
        self.serverapp.event_logger.emit(schema_id=EVENT_SCHEMA_ID, data={
            "name": job["metadata"]["name"],
            "notebook": job["spec"]["notebook"]["path"],
            "phase": (job.get("status") or {}).get("phase", ""),
            "reason": event["reason"],
            "message": event["note"],
            "type": event["type"],
            "time": event["eventTime"],
        })

    def initialize_handlers(self) -> None:
        from .handlers import routes

        self.handlers.extend(routes())

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        await self.engine.start()
        self.log.info("nbvalidation: %s backend started", self.backend_impl.name)

    async def stop_extension(self) -> None:
        await self.engine.stop()

    def current_activity(self) -> bool:
        """Keep an idle-culled server alive while jobs run."""
        return self.engine.busy()
