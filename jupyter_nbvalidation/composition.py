"""The one composition root: the settings ``c.NBValidation.*`` and the assembly of a
backend, an engine and a service from them.

The server extension (app.py) and the CLI without a server (cli.InProcess, and through
it ``run`` and ``pytest --nbvalidation``) both call :func:`assemble`, and the CLI reads
the same Jupyter config files as the server (:func:`jupyter_config`), so a validation
in this process gets the timeouts, limits and ``c.LocalBackend.*`` settings a server
on this machine would: the verdict does not depend on which of the two ran it.
"""

from __future__ import annotations

import logging
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, List, TraitError, Type, Unicode, validate
from traitlets.config import Config, LoggingConfigurable

from jupyter_nbvalidation.backends.base import Backend
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.secrets.registry import SecretRegistry
from jupyter_nbvalidation.service.jobs import JobService
from jupyter_nbvalidation.service.smtp_mail import Mail
from jupyter_nbvalidation.service.webhook import parse_webhooks


class NBValidationSettings(LoggingConfigurable):
    """What ``c.NBValidation.*`` configures (the server extension's class inherits it)."""

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
    max_concurrent_builds = Int(2, help="Jobs in Building at once on this server (its backend's builds: venvs, or build "
                                        "Jobs on Kubernetes); more wait in Initializing with reason Queued, in submit "
                                        "order. Sized for a small node (2 cores); 0: no cap.").tag(config=True)
    max_concurrent_validations = Int(4, help="Jobs in ValidationRunning at once (kernels, or validation Pods on "
                                             "Kubernetes); more wait in BuildComplete with reason Queued, in submit "
                                             "order. Counted from the store, so right after a restart and in HA. "
                                             "Sized for a small node (2 cores); 0: no cap.").tag(config=True)
    workers = Int(16, help="Jobs reconciled at once (one in-flight reconcile per job).").tag(config=True)
    resync_period = Float(300.0, help="Seconds between safety-net resyncs of all active jobs; "
                                      "reaction to changes is event-driven.").tag(config=True)
    max_notebook_bytes = Int(10 * 2**20, help="Largest notebook accepted at submit, in bytes.").tag(config=True)
    max_page_size = Int(500, help="Largest `limit` accepted by GET /jobs.").tag(config=True)
    max_input_files = Int(1000, help="Most files a job's spec.inputFiles may match.").tag(config=True)
    max_input_bytes = Int(50 * 2**20, help="Largest total size of a job's spec.inputFiles, in bytes.").tag(config=True)
    git_dir = Unicode("", help="Where notebooks from git are fetched (a cache per repository URL) and their commits' "
                               "files kept. Default: the local backend's data dir's git/, else Jupyter's data "
                               "dir's nbvalidation/git/.").tag(config=True)
    git_timeout = Float(120.0, help="Seconds a fetch of a job's notebook from git may take (spec.notebook.git); "
                                    "past it the job ends InfrastructureFailed.").tag(config=True)
    git_cache_ttl = Float(30 * 86400.0, help="Seconds a repository fetched for a job's notebook from git is kept "
                                              "after its last fetch (a garbage collection removes it then; the "
                                              "next fetch fetches it whole again). A commit's files are kept as "
                                              "long as a job of that commit exists. 0: repositories are kept."
                          ).tag(config=True)
    schedule_seconds_field = Bool(False, help="For tests only: a schedule's cron expression may have a sixth "
                                              "field in front, counting seconds (a tick every few seconds); "
                                              "off, such an expression is a 400 naming spec.schedule."
                                  ).tag(config=True)
    schedule_max_sleep = Float(60.0, help="Most seconds the schedules' loop sleeps between two looks at the store "
                                          "(a schedule written through another server on the same data dir is "
                                          "seen within it; this server's own changes wake it at once)."
                               ).tag(config=True)
    secrets = Dict(help="Secrets by name, for a job's podConfig.credentials (docs/secrets.md): "
                        "{name: {'fromEnv': {KEY: SERVER_ENV_VAR, ...}} or {'fromFile': '/abs/path'} (KEY=VALUE lines "
                        "or a JSON object) or {'fromSecret': 'k8s-secret-name'} (kubernetes backend), with 'users' and 'groups' (the Hub users who may use it; with neither, "
                        "only the server's own user)}. Values are read at each run, never stored.").tag(config=True)

    webhooks: List[Any] = List(help="Where a schedule's series that changes colour is told (docs/watching.md, \"When it turns "
                         "red\"): a list of {'url': 'https://...', 'secret': NAME} (the HMAC key: a secret of "
                         "`secrets` by name, its key 'secretKey' or its only key) or {'url': ..., 'key': LITERAL}, "
                         "or a bare URL (unsigned). Each gets a JSON POST signed in X-Nbvalidation-Signature-256 "
                         "(sha256=<hex HMAC-SHA256 of the body>).").tag(config=True)
    webhook_attempts = Int(5, help="Tries of one webhook delivery (a connection error, a timeout, a 429 or a 5xx "
                                   "is tried again) before it is recorded as undelivered.").tag(config=True)
    webhook_backoff = Float(1.0, help="Seconds before a webhook delivery's second try, doubling for each next "
                                      "one.").tag(config=True)
    webhook_timeout = Float(10.0, help="Seconds one webhook request may take.").tag(config=True)
    auto_bisect_max_steps = Int(6, help="Validations the search for the cause may run by itself when a schedule's "
                                        "notebook turns red after a success and its environment changed (the search "
                                        "`POST /jobs/{name}/bisect` starts); 0: no search, the change summary "
                                        "only.").tag(config=True)
    public_url = Unicode("", help="This server's URL as the receivers of its notifications reach it "
                                  "(e.g. https://hub.example.org/user/me/): a notification's `url` is the "
                                  "job's REST URL under it; empty: no link.").tag(config=True)

    smtp_host = Unicode("", help="An SMTP server that notifications are also e-mailed through (empty: no "
                                 "e-mail).").tag(config=True)
    smtp_port = Int(25, help="The SMTP server's port.").tag(config=True)
    smtp_starttls = Bool(False, help="Upgrade the SMTP connection with STARTTLS before sending.").tag(config=True)
    smtp_from = Unicode("nbvalidation@localhost", help="The notifications' sender address.").tag(config=True)
    smtp_to: List[Any] = List(Unicode(), help="Who the notifications are e-mailed to (addresses).").tag(config=True)
    smtp_secret = Unicode("", help="A secret of `secrets` by name with the SMTP login (keys username and password); "
                                   "empty: no login.").tag(config=True)

    @validate("webhooks")
    def _check_webhooks(self, proposal: Any) -> Any:
        try:
            parse_webhooks(proposal["value"])
        except ValueError as e:
            raise TraitError(str(e)) from None
        return proposal["value"]

    @validate("secrets")
    def _check_secrets(self, proposal: Any) -> Any:
        try:
            SecretRegistry(proposal["value"])
        except ValueError as e:
            raise TraitError(str(e)) from None
        return proposal["value"]

    def secret_registry(self) -> SecretRegistry:
        """The registry of ``secrets`` as configured now."""
        return SecretRegistry(self.secrets)


def make_backend(kind: str, cls: type[Backend] | None, parent: Any) -> Backend:
    if cls is not None:
        return cls(parent=parent)
    if kind == "kubernetes":
        try:
            from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend  # optional: kubernetes
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in ("kubernetes", "aiohttp", "pydantic"):
                raise
            raise RuntimeError(f"backend = 'kubernetes' needs the Kubernetes client, which is not installed "
                               f"(no module {e.name}): pip install 'jupyter-nbvalidation[kubernetes]'") from None

        return KubernetesBackend(parent=parent)
    from jupyter_nbvalidation.backends.local import (
        LocalBackend,  # deferred: start-up time (the CLI talking to a server never loads the local backend)
    )

    return LocalBackend(parent=parent)


def assemble(settings: NBValidationSettings, root_dir: str, log: Any, *,
             backend: Backend | None = None) -> JobService:
    """The backend (configured from ``settings``' config: ``c.LocalBackend.*`` ...), its
    engine and the service over them; ``backend`` when the caller made its own."""
    backend = backend or make_backend(settings.backend, settings.backend_class, settings)
    backend.secrets = settings.secret_registry()  # the service checks names, the backend reads values at a run
    builds, validations = settings.max_concurrent_builds, settings.max_concurrent_validations
    # LocalBackend.max_parallel_*: deprecated aliases of the engine's caps (one knob, never two)
    alias_builds, alias_validations = backend.admission_caps()
    if alias_builds is not None or alias_validations is not None:
        log.debug("nbvalidation: LocalBackend.max_parallel_* are deprecated; use NBValidation.max_concurrent_*")
    builds = builds if alias_builds is None else alias_builds
    validations = validations if alias_validations is None else alias_validations
    engine = Engine(backend, log=log, build_timeout=settings.build_timeout,
                    validation_timeout=settings.validation_timeout, workers=settings.workers,
                    resync_period=settings.resync_period, max_retries=settings.max_retries,
                    retry_backoff=settings.retry_backoff, max_concurrent_builds=builds,
                    max_concurrent_validations=validations)
    service = JobService(engine, backend, root_dir, max_notebook_bytes=settings.max_notebook_bytes,
                         max_input_files=settings.max_input_files, max_input_bytes=settings.max_input_bytes,
                         git_dir=settings.git_dir or None, git_timeout=settings.git_timeout,
                         git_cache_ttl=settings.git_cache_ttl,
                         schedule_seconds_field=settings.schedule_seconds_field)
    notifier = service.notifier
    notifier.webhooks, notifier.max_steps = parse_webhooks(settings.webhooks), settings.auto_bisect_max_steps
    notifier.attempts, notifier.backoff = settings.webhook_attempts, settings.webhook_backoff
    notifier.timeout, notifier.public_url = settings.webhook_timeout, settings.public_url
    if settings.smtp_host and settings.smtp_to:
        notifier.mail = Mail(settings.smtp_host, settings.smtp_port, settings.smtp_from, tuple(settings.smtp_to),
                             settings.smtp_starttls, settings.webhook_timeout)
        notifier.mail_secret = settings.smtp_secret
    return service


def jupyter_config() -> Config:
    """The Jupyter server's config files as a server started here reads them
    (``jupyter_server_config.json`` and ``.py`` in every ``jupyter --paths`` config
    folder, the user's last), with ``c.NBValidation`` also as ``c.NBValidationSettings``."""
    from jupyter_core.paths import (
        jupyter_config_path,  # deferred: start-up time (Jupyter's config paths, only when the CLI runs without a server)
    )
    from traitlets.config.loader import (  # deferred: start-up time (traitlets' config loaders, only when the CLI runs without a server)
        ConfigFileNotFound,
        JSONFileConfigLoader,
        PyFileConfigLoader,
    )

    config = Config()
    for folder in reversed(jupyter_config_path()):  # lowest priority first: later ones override
        for loader in (JSONFileConfigLoader, PyFileConfigLoader):
            suffix = ".json" if loader is JSONFileConfigLoader else ".py"
            try:
                config.merge(loader(f"jupyter_server_config{suffix}", path=folder).load_config())
            except ConfigFileNotFound:
                continue
    if "NBValidation" in config:
        config.NBValidationSettings.merge(config.NBValidation)
    return config


def local_service(root_dir: str, data_dir: str | None = None, backend_config: dict[str, Any] | None = None,
                  log: Any = None, config: Config | None = None) -> JobService:
    """The service of the CLI without a server: the local backend, whatever
    ``c.NBValidation.backend`` says (a server is what reaches a cluster), with this
    machine's Jupyter config and then ``data_dir`` and ``backend_config`` over it."""

    from jupyter_nbvalidation.backends.local import (
        LocalBackend,  # deferred: start-up time (the CLI talking to a server never loads the local backend)
    )

    config = jupyter_config() if config is None else config
    settings = NBValidationSettings(config=config)
    kw: dict[str, Any] = {"data_dir": data_dir} if data_dir else {}
    kw.update(backend_config or {})
    backend = LocalBackend(parent=settings, **kw)  # (keyword arguments win over the config)
    return assemble(settings, root_dir, log or logging.getLogger("jupyter_nbvalidation"), backend=backend)


def local_store_file(data_dir: str | None = None, config: Config | None = None) -> str:
    """The SQLite file of the local backend's store: in ``data_dir``, else where this
    machine's Jupyter config (``c.LocalBackend.data_dir``) or the default puts it."""
    from jupyter_nbvalidation.backends.local import (
        LocalBackend,  # deferred: start-up time (as local_service)
    )

    settings = NBValidationSettings(config=jupyter_config() if config is None else config)
    backend = LocalBackend(parent=settings, **({"data_dir": data_dir} if data_dir else {}))
    return str(backend.store.path)
