"""The job spec, declared once: every field with its kind, limits, description and command-line options.

Everything else that describes a spec is built from this table or checked against it:

- ``model.SPEC_SCHEMA`` and ``model.validate_spec`` (the validator: the 400 naming the field) read
  :data:`SPEC` through :func:`validator_schema`; ``openapi.SPEC_SCHEMA`` (the REST API's document) is
  ``spec_schema.json_schema()``; the CRD's spec schema (``k8s/manifests/crd.yaml``) is
  ``spec_schema.json_schema("crd")``, written into that file by ``tools/gen_spec.py``;
- the lab's spec type (``labextension/src/spec.generated.ts``) is written by the same tool, and so are
  the TypedDicts at the end of this file (``documents`` re-exports them);
- the CLI's spec options (``cli.add_spec_options`` / ``spec_from_options``, also used by the magic and
  the pytest plugin) are the :class:`Cli` entries below;
- the runner's arguments a spec gives (``spec/runner_args.py``, every backend) are the :class:`Runner`
  entries, in :data:`RUNNER_ORDER`; a runner option whose server default is a backend trait
  (``Runner.default``) reaches the plan, the engine and the verdict cache's key through
  ``Backend.runner_defaults()``.

``tests/test_spec_schemas.py`` fails when a generated file is stale: run ``python tools/gen_spec.py``.
Standard library only, and nothing of the package (a leaf: the validator, the REST API, the generator
and the runner's side all may import it). Adding a field: docs/architecture.md, "One spec table".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, TypedDict, Union

# --- the limits (README, "Limits"): every duration, count and size a spec can carry ---------------

MAX_DURATION_SECONDS = 24 * 3600  # timeout, cellTimeout, buildConfig.timeout
MAX_DURATION_CHARS = 64
MAX_STRING_CHARS = 4096  # paths, image references, strategy names
MAX_TOLERANCE = 1e9  # floatingPointTolerance, relativeTolerance
MAX_ENV_ITEMS = 100
MAX_ENV_NAME_CHARS = 256
MAX_ENV_VALUE_CHARS = 32 * 1024
MAX_ENV_TOTAL_BYTES = 256 * 1024
MAX_CREDENTIALS = 20  # podConfig.credentials: secret names
MAX_SECRET_NAME_CHARS = 253
MAX_REQUIREMENTS_ITEMS = 500  # the spec list (requirements files: see requirements.py)
MAX_REQUIREMENT_CHARS = 4096
MAX_EXTRAS = 50  # buildConfig.extras
MAX_EXTRA_CHARS = 100
MAX_INPUT_PATTERNS = 100
MAX_INPUT_PATTERN_CHARS = 1024
MAX_PATTERNS = 50  # customTimestampPatterns, ignoreOutputTypes
MAX_PATTERN_CHARS = 1000
MAX_MAP_ITEMS = 50  # resources.requests/limits, nodeSelector, tolerations
MAX_QUANTITY = 1e18  # a resource quantity (after its suffix)
MAX_QUANTITY_CHARS = 64
MAX_LABEL_VALUE_CHARS = 63
MAX_TOLERATION_CHARS = 316
MAX_PARAMETERS = 100  # spec.parameters entries
MAX_PARAMETER_NAME_CHARS = 256
MAX_PARAMETERS_BYTES = 64 * 1024  # all of spec.parameters as JSON
MAX_PARAMETER_DEPTH = 32  # nesting of lists and objects in one value
MAX_SANITIZERS = 50  # comparisonConfig.sanitizers
MAX_SANITIZER_SECTION_CHARS = 256
MAX_OUTPUT_BYTES = 2**30  # outputLimits.perCell, outputLimits.total (bytes; defaults: runner/outputs.py)
INT64 = 2**63 - 1

# --- the patterns ------------------------------------------------------------------------------------

#: a Go duration as the schemas give it (the validator also takes a number of seconds)
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
#: a parameter name: an ASCII Python identifier (keywords are refused separately)
PARAMETER_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
QUANTITY_PATTERN = r"^(\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: flatten.OUTPUT_SELECTOR_PATTERN (the runner's side; tests/test_spec_schemas.py checks they agree)
OUTPUT_SELECTOR_PATTERN = (r"^(stream|execute_result|display_data|error|stream:[A-Za-z0-9_-]+"
                           r"|[a-z0-9][a-z0-9.+-]*/(\*|[A-Za-z0-9][A-Za-z0-9.+_-]*))$")
NOTEBOOK_PATTERN = r"\.ipynb$"
#: a repository's URL (spec/checks.py checks more: a host, no password in it)
GIT_URL_PATTERN = r"^((https?|ssh|file)://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:).+$"
SECRET_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"  # secrets/registry.py's NAME
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
COMPARISON_STRATEGIES = ("exact", "normalized")


# --- the table ---------------------------------------------------------------------------------------

#: Cli.action: what the option does with what it is given (cli.py carries each out)
CLI_ACTIONS = (
    "value",           # the text as it is
    "duration",        # a duration: "10m" as it is, a number of seconds as "60s"
    "float",           # a number
    "choice",          # one of the field's enum values
    "append",          # repeatable: a list of the texts
    "set_true",        # a switch that sets the field to true
    "set_false",       # a switch that sets the field to false
    "parameter",       # -p NAME VALUE: VALUE read as JSON (or True/False/None), else a string; repeatable
    "raw_parameter",   # -r NAME VALUE: VALUE a string; repeatable
    "sanitizer_file",  # an nbval sanitizer file read into the list at submit; repeatable
)


@dataclass(frozen=True)
class Cli:
    """A command-line option (``submit``, ``run``, ``%nbvalidate``, ``--nbvalidation-option``) that
    sets a spec field. ``dest`` is the argparse attribute (default: from the first long flag)."""

    flags: tuple[str, ...]
    action: str
    help: str
    metavar: str | tuple[str, ...] | None = None
    dest: str | None = None

    def __post_init__(self) -> None:
        assert self.action in CLI_ACTIONS, self.action

    @property
    def attr(self) -> str:
        if self.dest:
            return self.dest
        long = next(f for f in self.flags if f.startswith("--"))
        return long[2:].replace("-", "_")


#: Runner.form: how a runner option's value is written as the runner's arguments (spec/runner_args.py)
RUNNER_FORMS = (
    "value",    # FLAG TEXT, when the value is not empty
    "float",    # FLAG NUMBER (as a float), when the value is set
    "int",      # FLAG N (a whole number), when the value is not 0
    "true",     # FLAG, when the value is true
    "false",    # FLAG, when the value is false (a switch whose default is true)
    "each",     # FLAG=ITEM for every item (one token: an item may start with "-")
    "json",     # FLAG=JSON (one compact token), when the value is not empty; ``keys``: each item's kept keys
    "seconds",  # FLAG SECONDS, always: the spec's duration, else the server's default (the plan resolves it)
)


@dataclass(frozen=True)
class Runner:
    """The field is a runner option: the runner takes it as ``flag`` (runner/options.py
    declares the same flag; tests/core/test_runner_options.py holds the two together),
    written as ``form`` (:data:`RUNNER_FORMS`). ``default``: the server's default of a
    ``seconds`` option when a backend holds it, as ``NAME``: the trait
    ``Backend.default_<NAME>`` (a user's ``c.LocalBackend.default_<NAME>``), which the
    plan takes as its keyword ``NAME`` and the verdict cache's key as
    ``default<Name>``."""

    flag: str
    form: str
    keys: tuple[str, ...] = ()
    default: str | None = None

    def __post_init__(self) -> None:
        assert self.form in RUNNER_FORMS, self.form


@dataclass(frozen=True)
class Field:
    """A leaf field. ``kind`` names the validator's check (model._check) and the shape in every
    schema: str, bool, duration, number (0..limit), bytes (a whole number, 1..limit), strlist /
    globlist / regexlist / outputlist (``limit`` = (max items, max characters)), envlist,
    quantities, labels, tolerations, sanitizers, parameters, enum (``limit`` = the values).
    ``pattern`` and ``min_length`` are for the schemas only (the validator's own check of the
    field is its kind's). ``crd`` is merged into the CRD's schema of the field only."""

    kind: str
    description: str
    limit: Any = None
    pattern: str | None = None
    min_length: int | None = None
    cli: tuple[Cli, ...] = ()
    crd: Mapping[str, Any] = field(default_factory=dict)
    runner: Runner | None = None


@dataclass(frozen=True)
class Obj:
    """An object of fields; ``typename`` names its TypedDict and TypeScript interface."""

    typename: str
    description: str
    fields: Mapping[str, Field | Obj]
    required: tuple[str, ...] = ()
    crd: Mapping[str, Any] = field(default_factory=dict)


_PATH = Field("str", "Path of the notebook (relative to the Jupyter server root, or to the repository's root with "
                     "git); must end in .ipynb.", pattern=NOTEBOOK_PATTERN, min_length=1)
_GIT = Obj("GitSource", "Where the notebook is: a git repository at a ref, fetched when the job is submitted.", {
    "url": Field("str", "The repository: https://, http://, ssh://, git@host:path or file:// (no password in it).",
                 pattern=GIT_URL_PATTERN, min_length=1),
    "ref": Field("str", "A branch, a tag or a full commit SHA.", min_length=1),
    "credentialsSecret": Field("str", "A secret with ssh-privatekey, or username with password or token.",
                               pattern=SECRET_NAME_PATTERN, min_length=1)}, ("url", "ref"))
_REF: dict[str, Field | Obj] = {"git": _GIT, "path": _PATH}

SPEC = Obj("JobSpec", "What to validate and how. Unknown fields are pruned.", {
    "notebook": Obj("NotebookRef", "The notebook to validate.", _REF, ("path",)),
    "goldenNotebook": Obj("NotebookRef", "A notebook with the expected outputs to compare against.", _REF, ("path",)),
    "inputFiles": Field(
        "globlist", "Files beside the notebook that it reads (globs relative to its folder), snapshotted at "
                    "submit; the validation runs among that snapshot.",
        (MAX_INPUT_PATTERNS, MAX_INPUT_PATTERN_CHARS),
        cli=(Cli(("--input-file",), "append", "a file beside the notebook it reads (glob relative to its folder; "
                 "repeatable): snapshotted at submit into spec.inputFiles", metavar="GLOB"),)),
    "podConfig": Obj("PodConfig", "The environment the notebook runs in.", {
        "containerImage": Field("str", "Image to run the notebook in (when no build is done)."),
        "env": Field("envlist", "Environment variables of the validation (literal values only)."),
        "credentials": Field("strlist", "Names of secrets the server knows (c.NBValidation.secrets) that the "
                                        "job's owner may use: every key of each reaches the kernel as an "
                                        "environment variable, its value read at the run and masked in every "
                                        "output, log and report.", (MAX_CREDENTIALS, MAX_SECRET_NAME_CHARS),
                             cli=(Cli(("--credential",), "append", "the name of a secret of the server whose keys "
                                                                   "the kernel gets as environment variables "
                                                                   "(repeatable)", metavar="NAME"),)),
        "resources": Obj("Resources", "Requests and limits of the validation container (over the server's "
                                      "defaults).", {
            "requests": Field("quantities", "Resource requests, e.g. {cpu: 500m, memory: 2Gi}."),
            "limits": Field("quantities", "Resource limits, e.g. {cpu: 2, memory: 4Gi}; the local backend holds "
                                          "memory only (a memory cgroup of the kernel's, else RLIMIT_AS)."),
        }),
        "serviceAccountName": Field("str", "Service account of the validation Pod (Kubernetes), one of those the "
                                           "admin allows (c.KubernetesBackend.allowed_service_accounts); its API "
                                           "token is mounted."),
        "nodeSelector": Field("labels", "Node labels the validation Pod must be scheduled on."),
        "tolerations": Field("tolerations", "Taints the validation Pod tolerates (e.g. of GPU nodes)."),
        "buildConfig": Obj("BuildConfig", "Build an environment (an image on Kubernetes) from the notebook's "
                                          "requirements.", {
            "enabled": Field("bool", "Build an environment first (default true); false validates in the "
                                     "server's own interpreter (local) or podConfig.containerImage (Kubernetes).",
                             cli=(Cli(("--no-build",), "set_false",
                                      "validate without building an environment"),)),
            "strategy": Field("str", "Build backend; auto picks one from what is available.",
                              cli=(Cli(("--strategy",), "value", "build strategy (local: auto, uv, venv)"),),
                              crd={"enum": ["auto", "job", "kaniko", "tekton", "openshift"]}),
            "baseImage": Field("str", "Base image of the build (Kubernetes)."),
            "requirementsFile": Field("str", "Path of a requirements file next to the notebook.",
                                      cli=(Cli(("--requirements-file",), "value",
                                               "requirements file, relative to the notebook's folder"),)),
            "requirements": Field("strlist", "Inline pip requirement specifiers.",
                                  (MAX_REQUIREMENTS_ITEMS, MAX_REQUIREMENT_CHARS),
                                  cli=(Cli(("--requirement",), "append",
                                           "a requirement (repeatable) instead of a file"),)),
            "extras": Field("strlist", "Extras of the repository's own project, installed with it when the "
                                       "environment found is that project (pyproject.toml / setup.py, or the "
                                       "uv.lock of a packaged project), e.g. [plot, xarray].",
                            (MAX_EXTRAS, MAX_EXTRA_CHARS),
                            cli=(Cli(("--extra",), "append", "an extra of the repository's own project to install "
                                                            "with it (repeatable), e.g. --extra plot",
                                     metavar="NAME"),)),
            "constraints": Field("strlist", "Constraint specifiers over whatever the requirements install "
                                            "(pip's -c: a version a package must have if it is installed, never "
                                            "a reason to install it), e.g. the pins of a last success.",
                                 (MAX_REQUIREMENTS_ITEMS, MAX_REQUIREMENT_CHARS),
                                 cli=(Cli(("--constraint",), "append",
                                          "a constraint specifier, e.g. 'pandas<3' (repeatable; pip's -c)",
                                          metavar="SPEC"),)),
            "timeout": Field("duration", "Build timeout as a Go duration, e.g. 10m or 1h30m.", MAX_DURATION_SECONDS,
                             cli=(Cli(("--build-timeout",), "duration",
                                      "build timeout, e.g. 15m or 600 (seconds)"),)),
        }, crd={"x-kubernetes-validations": [{
            "rule": "!(has(self.requirementsFile) && has(self.requirements))",
            "message": "requirementsFile and requirements are mutually exclusive: set at most one of them",
            "fieldPath": ".requirements"}]}),
    }),
    "comparisonConfig": Obj("ComparisonConfig", "How outputs are compared with the golden notebook.", {
        "strategy": Field("enum", "normalized (default) or exact.", COMPARISON_STRATEGIES,
                          cli=(Cli(("--comparison",), "choice", "comparison strategy"),),
                          runner=Runner("--comparison", "value")),
        "floatingPointTolerance": Field(
            "number", "Absolute tolerance for numbers in outputs (normalized mode; default 1e-4).", MAX_TOLERANCE,
            cli=(Cli(("--abs-tol", "--tolerance"), "float",
                     "normalized comparison: absolute tolerance for numbers (default 1e-4)",
                     metavar="X", dest="tolerance"),),
            runner=Runner("--abs-tol", "float")),
        "relativeTolerance": Field(
            "number", "Relative tolerance for numbers in outputs (normalized mode; default 0).", MAX_TOLERANCE,
            cli=(Cli(("--rel-tol",), "float", "normalized comparison: relative tolerance for numbers (default 0)",
                     metavar="X"),),
            runner=Runner("--rel-tol", "float")),
        "ignoreTimestamps": Field(
            "bool", "normalized mode replaces dates and times before comparing (default true).",
            cli=(Cli(("--keep-timestamps",), "set_false", "compare dates and times too"),),
            runner=Runner("--keep-timestamps", "false")),
        "customTimestampPatterns": Field(
            "regexlist", "normalized mode also replaces what these regular expressions match.",
            (MAX_PATTERNS, MAX_PATTERN_CHARS),
            cli=(Cli(("--timestamp-pattern",), "append",
                     "normalized comparison: also mask what REGEX matches (repeatable)", metavar="REGEX"),),
            runner=Runner("--timestamp-pattern", "each")),
        "ignoreOutputTypes": Field(
            "outputlist", "outputs left out of the comparison, by nbformat type (stream, execute_result, "
                          "display_data, error), stream (stream:stderr) or MIME type (text/html, image/*).",
            (MAX_PATTERNS, MAX_PATTERN_CHARS), pattern=OUTPUT_SELECTOR_PATTERN,
            cli=(Cli(("--ignore-output",), "append",
                     "leave out outputs of this type (stream, execute_result, display_data, error), stream "
                     "(stream:stderr) or MIME type (text/html, image/*) (repeatable)", metavar="SELECTOR"),),
            runner=Runner("--ignore-output-type", "each")),
        "ignoreExecutionCount": Field(
            "bool", "false compares execution counts too (default true).",
            cli=(Cli(("--compare-execution-count",), "set_false", "compare execution counts too"),),
            runner=Runner("--compare-execution-count", "false")),
        "lax": Field(
            "bool", "nbval's lax mode, compare only the cells marked NBVAL_CHECK_OUTPUT or tagged "
                    "nbval-check-output (default false).",
            cli=(Cli(("--lax",), "set_true",
                     "compare only cells marked # NBVAL_CHECK_OUTPUT or tagged nbval-check-output"),),
            runner=Runner("--lax", "true")),
        "sanitizers": Field(
            "sanitizers", "nbval sanitizers (regular expression and its re.sub replacement), applied in order to "
                          "golden and actual text before comparing, in both strategies.",
            cli=(Cli(("--sanitize-with",), "sanitizer_file",
                     "an nbval sanitizer file ([section], regex: / replace: lines) applied before comparing "
                     "(repeatable); its content goes into the spec", metavar="FILE"),),
            runner=Runner("--sanitizers", "json", keys=("regex", "replace"))),
    }),
    "timeout": Field("duration", "Overall timeout as a Go duration, e.g. 30m.", MAX_DURATION_SECONDS,
                     cli=(Cli(("--timeout",), "duration", "validation timeout, e.g. 30m"),),
                     runner=Runner("--timeout", "seconds")),
    "cellTimeout": Field("duration", "Per-cell timeout as a Go duration, e.g. 90s.", MAX_DURATION_SECONDS,
                         cli=(Cli(("--cell-timeout",), "duration", "per-cell timeout, e.g. 10m or 60 (seconds)"),),
                         runner=Runner("--cell-timeout", "seconds", default="cell_timeout")),
    "parameters": Field(
        "parameters", "Parameters injected as papermill does, {name: JSON value}, as a new cell tagged "
                      "injected-parameters after the cell tagged parameters (at the top when none). Names are "
                      f"Python identifiers; at most {MAX_PARAMETERS_BYTES // 1024} KiB of JSON in all.",
        cli=(Cli(("-p", "--parameter"), "parameter",
                 "a parameter injected as papermill does (spec.parameters); VALUE is read as JSON (1, 0.5, true, "
                 "[1, 2]) or True/False/None, else kept as a string (repeatable)", metavar=("NAME", "VALUE")),
             Cli(("-r", "--raw-parameter"), "raw_parameter", "a parameter whose VALUE is always a string "
                 "(repeatable)", metavar=("NAME", "VALUE"))),
        runner=Runner("--parameters", "json")),
    "outputLimits": Obj("OutputLimits", "How much output the stored executed notebook keeps (a marker output says "
                                        "how much was cut; the verdict is decided on the full output).", {
        "perCell": Field("bytes", "Bytes per cell (default 2 MiB).", MAX_OUTPUT_BYTES,
                         runner=Runner("--max-cell-output-bytes", "int")),
        "total": Field("bytes", "Bytes for the whole notebook (default 32 MiB).", MAX_OUTPUT_BYTES,
                       runner=Runner("--max-output-bytes", "int")),
    }),
}, ("notebook",))

#: the order the CLI's spec options are listed in (--help); every Cli of the table, by its first flag
CLI_ORDER = ("--no-build", "--requirements-file", "--requirement", "--extra", "--constraint", "--input-file", "--credential", "--strategy",
             "--build-timeout", "--timeout", "--cell-timeout", "-p", "-r", "--comparison", "--abs-tol", "--rel-tol",
             "--timestamp-pattern", "--sanitize-with", "--lax", "--ignore-output", "--keep-timestamps",
             "--compare-execution-count")

#: the order of the runner's arguments a spec gives; every Runner of the table, by its flag
RUNNER_ORDER = ("--comparison", "--abs-tol", "--rel-tol", "--keep-timestamps", "--timestamp-pattern",
                "--ignore-output-type", "--compare-execution-count", "--lax", "--sanitizers", "--parameters",
                "--max-cell-output-bytes", "--max-output-bytes", "--cell-timeout", "--timeout")


# --- reading the table -------------------------------------------------------------------------------


def walk(obj: Obj = SPEC, prefix: str = "") -> Iterator[tuple[str, Field | Obj]]:
    """Every field and object below ``obj``, as (dotted path, entry), parents first."""
    for key, sub in obj.fields.items():
        path = f"{prefix}.{key}" if prefix else key
        yield path, sub
        if isinstance(sub, Obj):
            yield from walk(sub, path)


def leaf_paths() -> set[str]:
    return {path for path, sub in walk() if isinstance(sub, Field)}


def cli_options() -> list[tuple[str, Field, Cli]]:
    """(spec path, field, option) for every command-line option, in :data:`CLI_ORDER`."""
    found = {c.flags[0]: (path, sub, c) for path, sub in walk() if isinstance(sub, Field) for c in sub.cli}
    assert set(found) == set(CLI_ORDER), set(found) ^ set(CLI_ORDER)
    return [found[flag] for flag in CLI_ORDER]


def runner_options() -> list[tuple[str, Runner]]:
    """(spec path, runner option) for every runner option of the table, in :data:`RUNNER_ORDER`."""
    found = {sub.runner.flag: (path, sub.runner) for path, sub in walk()
             if isinstance(sub, Field) and sub.runner is not None}
    assert set(found) == set(RUNNER_ORDER), set(found) ^ set(RUNNER_ORDER)
    return [found[flag] for flag in RUNNER_ORDER]


def validator_schema(obj: Obj = SPEC) -> dict[str, Any]:
    """``model.SPEC_SCHEMA``: {key: nested dict | (kind, limit)}."""
    return {key: validator_schema(sub) if isinstance(sub, Obj) else (sub.kind, sub.limit)
            for key, sub in obj.fields.items()}


# --- the documents' types ----------------------------------------------------------------------------

#: a duration as a spec gives it: Go style ("30m", "1h30m", "500ms") or seconds
Duration = Union[str, int, float]
#: a Kubernetes quantity ("500m", "2Gi", 1)
Quantity = Union[str, int, float]


# the shapes of the kinds whose items are objects (envlist, tolerations, sanitizers)
class _EnvVarRequired(TypedDict):
    name: str


class EnvVar(_EnvVarRequired, total=False):
    value: str


class Toleration(TypedDict, total=False):
    key: str
    operator: str
    value: str
    effect: str
    tolerationSeconds: int


class _SanitizerRequired(TypedDict):
    regex: str


class Sanitizer(_SanitizerRequired, total=False):
    replace: str
    section: str


#: the Python type of a field of each kind (the TypedDicts below)
PY_TYPES = {"str": "str", "bool": "bool", "duration": "Duration", "number": "float", "bytes": "int",
            "strlist": "list[str]", "globlist": "list[str]", "regexlist": "list[str]", "outputlist": "list[str]",
            "enum": "str", "envlist": "list[EnvVar]", "quantities": "dict[str, Quantity]",
            "labels": "dict[str, str]", "tolerations": "list[Toleration]", "sanitizers": "list[Sanitizer]",
            "parameters": "dict[str, Any]"}

# The objects' TypedDicts, generated by tools/gen_spec.py from SPEC above: do not edit by hand.
# BEGIN GENERATED TYPEDDICTS
class _GitSourceRequired(TypedDict):
    url: str
    ref: str


class GitSource(_GitSourceRequired, total=False):
    """Where the notebook is: a git repository at a ref, fetched when the job is submitted."""

    credentialsSecret: str


class _NotebookRefRequired(TypedDict):
    path: str


class NotebookRef(_NotebookRefRequired, total=False):
    """The notebook to validate."""

    git: GitSource


class Resources(TypedDict, total=False):
    """Requests and limits of the validation container (over the server's defaults)."""

    requests: dict[str, Quantity]
    limits: dict[str, Quantity]


class BuildConfig(TypedDict, total=False):
    """Build an environment (an image on Kubernetes) from the notebook's requirements."""

    enabled: bool
    strategy: str
    baseImage: str
    requirementsFile: str
    requirements: list[str]
    extras: list[str]
    constraints: list[str]
    timeout: Duration


class PodConfig(TypedDict, total=False):
    """The environment the notebook runs in."""

    containerImage: str
    env: list[EnvVar]
    credentials: list[str]
    resources: Resources
    serviceAccountName: str
    nodeSelector: dict[str, str]
    tolerations: list[Toleration]
    buildConfig: BuildConfig


class ComparisonConfig(TypedDict, total=False):
    """How outputs are compared with the golden notebook."""

    strategy: str  # exact | normalized
    floatingPointTolerance: float
    relativeTolerance: float
    ignoreTimestamps: bool
    customTimestampPatterns: list[str]
    ignoreOutputTypes: list[str]
    ignoreExecutionCount: bool
    lax: bool
    sanitizers: list[Sanitizer]


class OutputLimits(TypedDict, total=False):
    """How much output the stored executed notebook keeps (a marker output says how much was cut; the verdict is
    decided on the full output)."""

    perCell: int
    total: int


class _JobSpecRequired(TypedDict):
    notebook: NotebookRef


class JobSpec(_JobSpecRequired, total=False):
    """What to validate and how. Unknown fields are pruned."""

    goldenNotebook: NotebookRef
    inputFiles: list[str]
    podConfig: PodConfig
    comparisonConfig: ComparisonConfig
    timeout: Duration
    cellTimeout: Duration
    parameters: dict[str, Any]
    outputLimits: OutputLimits
# END GENERATED TYPEDDICTS
