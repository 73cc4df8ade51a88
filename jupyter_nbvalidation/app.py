"""The Jupyter server extension: configuration, lifecycle, routes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp

from jupyter_nbvalidation._version import __version__
from jupyter_nbvalidation.composition import NBValidationSettings, assemble
from jupyter_nbvalidation.core.documents import Event, Job
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.service.jobs import JobService
from jupyter_nbvalidation.service.scheduler import Scheduler

EVENT_SCHEMA_ID = "https://nbvalidation.dev/events/job/v1"
EVENT_SCHEMA = Path(__file__).parent / "event_schemas" / "job.v1.yaml"


class NBValidation(ExtensionApp, NBValidationSettings):
    """Validate notebooks in clean environments: ``c.NBValidation.*``."""

    name = "jupyter_nbvalidation"
    version = __version__
    load_other_extensions = True

    engine: Engine
    service: JobService
    scheduler: Scheduler | None = None  # schedules' ticks, while this server's engine leads
    forward_to: str | None = None  # a user server on a hub with the team's service: it forwards there

    def initialize_settings(self) -> None:
        root = self.serverapp.root_dir if self.serverapp is not None else "."
        from jupyter_nbvalidation.hub import forward  # deferred: start-up time (as the handlers, below)

        self.forward_to = forward.service_url()
        if self.forward_to:  # no engine, no store here: the team's service runs the jobs
            self.settings.update(forward.forward_settings(self.forward_to, root))
            self.log.info("nbvalidation: forwarding to the team's validation service at %s", self.forward_to)
            return
        self.service = assemble(self, root, self.log)
        self.backend_impl, self.engine = self.service.backend, self.service.engine
        if self.serverapp is not None and self.serverapp.runtime_dir:  # its jpserver-*.json holds the token
            self.backend_impl.add_private_paths([self.serverapp.runtime_dir])
        self.settings.update({"nbvalidation_service": self.service, "nbvalidation_app": self})
        if self.serverapp is not None and getattr(self.serverapp, "event_logger", None) is not None:
            try:
                assert self.serverapp.event_logger is not None  # checked just above
                self.serverapp.event_logger.register_event_schema(EVENT_SCHEMA)
                self.engine.recorder.listeners.append(self._publish)
            except Exception as e:  # the lab falls back to polling
                self.log.warning("nbvalidation: live updates unavailable: %s", e)

    def _publish(self, event: Event, job: Job) -> None:
        # a listener only once the server's event logger took the schema (initialize_settings)
        assert self.serverapp is not None and self.serverapp.event_logger is not None
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
        from jupyter_nbvalidation.hub import forward  # deferred: as routes, above
        from jupyter_nbvalidation.service.handlers import (
            routes,  # deferred: start-up time (the handlers import tornado's web stack only when the server loads us)
        )

        self.handlers.extend(forward.routes() if self.forward_to else routes())

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        if self.forward_to:
            return
        await self.service.start_serving(self.log)
        self.scheduler = Scheduler(self.service, self.log, max_sleep=self.schedule_max_sleep)
        self.scheduler.start()
        if self.engine.running:
            self.log.info("nbvalidation: %s backend started", self.backend_impl.name)

    async def stop_extension(self) -> None:
        if not self.forward_to:
            if self.scheduler is not None:  # no tick is run by an engine that is stopping
                await self.scheduler.stop()
            await self.service.stop()

    def current_activity(self) -> bool:
        """Keep an idle-culled server alive while jobs run (its own: the team's service's are its)."""
        return not self.forward_to and self.engine.busy()
