"""The OpenAPI 3 document of the REST API (served at /openapi.json)."""

from __future__ import annotations

from typing import Any

import jupyter_nbvalidation.core.model as M
from jupyter_nbvalidation._version import __version__
from jupyter_nbvalidation.core.spec_schema import json_schema
from jupyter_nbvalidation.service.openapi_schedules import SCHEDULE_SCHEMA, schedule_paths

# the spec's schema is built from the one table (spec_table.py), as the CRD's and the validator's are
SPEC_SCHEMA = json_schema("openapi")
#: a project settings file's options: the spec's fields minus notebook, none required; in them
#: goldenNotebook.path is relative to the notebook's folder (spec/project.py)
PARTIAL_SPEC_SCHEMA = {**SPEC_SCHEMA, "required": [],
                       "properties": {k: v for k, v in SPEC_SCHEMA["properties"].items() if k != "notebook"},
                       "description": "Spec fields minus notebook, as the project settings file holds them; "
                                      "goldenNotebook.path is relative to the notebook's folder."}
PROJECT_SETTINGS_SCHEMA = {
    "type": "object", "required": ["file", "exists", "options", "entry"],
    "properties": {
        "file": {"type": "string", "description": "the settings file that applies (pyproject.toml's "
                                                  "[tool.nbvalidation], or nbvalidation.toml), or the one a PUT "
                                                  "would write, relative to the server root"},
        "exists": {"type": "boolean"},
        "options": {"$ref": "#/components/schemas/PartialSpec",
                    "description": "what the file gives this notebook: the defaults, then every matching entry"},
        "entry": {"$ref": "#/components/schemas/PartialSpec",
                  "description": "this notebook's own entry only ({} if none)"}},
}

# status.progress: written during ValidationRunning (at most once a second, never an event), kept as it
# last was at the terminal phase. Cell indexes are 0-based notebook indexes (all cells, markdown included).
PROGRESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["cellsTotal", "cellsDone", "currentCellIndex", "currentCellStartedAt", "cells", "updatedAt"],
    "properties": {
        "cellsTotal": {"type": "integer", "minimum": 0, "description": "code cells that will be executed"},
        "cellsDone": {"type": "integer", "minimum": 0},
        "currentCellIndex": {"type": ["integer", "null"], "description": "0-based index of the running cell"},
        "currentCellStartedAt": {"type": ["string", "null"], "format": "date-time"},
        "cells": {"type": "array", "items": {
            "type": "object", "required": ["cellIndex", "status"],
            "properties": {"cellIndex": {"type": "integer"},
                           "status": {"type": "string", "enum": ["ok", "error", "skipped"]},
                           "executionTime": {"type": "number", "description": "seconds"}}}},
        "updatedAt": {"type": "string", "format": "date-time"},
    },
}

JOB_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec", "status"],
    "properties": {
        "apiVersion": {"type": "string", "enum": ["nbvalidation.dev/v1alpha1"]},
        "kind": {"type": "string", "enum": ["NotebookValidationJob"]},
        "metadata": {"type": "object", "required": ["name", "uid"],
                     "properties": {"name": {"type": "string"}, "uid": {"type": "string"},
                                    "resourceVersion": {"type": "string"},
                                    "creationTimestamp": {"type": "string"}}},
        "spec": {"type": "object"},
        "status": {"type": "object", "properties": {
            "phase": {"type": "string", "enum": ["", *(str(p) for p in M.Phase.ORDER)]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "transitions": {"type": "array", "items": {"type": "object"}},
            "results": {"type": "array", "items": {"type": "object"}},
            "progress": PROGRESS_SCHEMA,
            "validationRetries": {"type": "integer", "minimum": 0,
                                  "description": "retries of the validation after transient faults that are not "
                                                 "the notebook's (absent = 0)"},
            "buildRetries": {"type": "integer", "minimum": 0,
                             "description": "retries of the build after transient faults, counted apart (absent = 0)"},
            "lastRetryTime": {"type": "string", "format": "date-time",
                              "description": "when the current attempt began after the last retry (its phase's "
                                             "deadline counts from here)"},
            "readSet": {"type": "object", "additionalProperties": True,
                        "description": "what the kernel of a Succeeded run read (local backend): files under the "
                                       "root by content and mode, folders it listed, environment files by size "
                                       "and times; uncacheable: why the verdict cannot be reused (the verdict "
                                       "cache re-checks it, docs/cli.md \"Verdict cache\")"},
            "eventsIncomplete": {"type": "boolean",
                                 "description": "true when an event of this job could not be recorded (after its "
                                                "retries) or was dropped: the timeline falls back to "
                                                "status.transitions"},
            "source": {"type": "object", "properties": {
                "url": {"type": "string"}, "ref": {"type": "string"},
                "commit": {"type": "string", "description": "the full SHA the ref named when the job was submitted"},
                "golden": {"type": "object", "description": "the golden notebook's own source, when it has one"}},
                "description": "a notebook from git (spec.notebook.git): the repository's URL, the ref asked for "
                               "and the commit it resolved to (no commit: the fetch failed, see message)"},
            "environment": {"type": "string",
                            "description": "what the job's environment is built from, written when the build is "
                                           "planned and kept on the final status: \"2 requirements from "
                                           "requirements.txt beside the notebook\", \"no requirements declared "
                                           "...\", or with the build disabled \"build disabled: the server's "
                                           "interpreter\""},
        }},
    },
}

# GET /jobs: each item is a job summary (queries.list_item): the job without what grows with the notebook
_LIST_STATUS = {k: v for k, v in JOB_SCHEMA["properties"]["status"]["properties"].items() if k != "results"}
_LIST_STATUS["progress"] = {**PROGRESS_SCHEMA,
                            "required": [r for r in PROGRESS_SCHEMA["required"] if r != "cells"],
                            "properties": {k: v for k, v in PROGRESS_SCHEMA["properties"].items() if k != "cells"}}
_LIST_STATUS["comparisonResult"] = {"type": ["object", "null"],
                                    "description": "the comparison's counts, without diffs"}
_LIST_STATUS["resultsSummary"] = {
    "type": "object", "required": ["cells", "byStatus", "outputTruncatedCells", "failedCell"],
    "description": "in place of status.results: cells by status, the failed cell's result (null when none), "
                   "how many cells' output was truncated in the stored notebook",
    "properties": {"cells": {"type": "integer", "minimum": 0},
                   "byStatus": {"type": "object", "additionalProperties": {"type": "integer"}},
                   "outputTruncatedCells": {"type": "integer", "minimum": 0},
                   "failedCell": {"type": ["object", "null"]}}}
JOB_SUMMARY_SCHEMA = {**JOB_SCHEMA, "description": "a job as GET /jobs lists it: status.results becomes "
                      "status.resultsSummary, comparisonResult has no diffs, progress no cells; "
                      "GET /jobs/{name} gives the whole job",
                      "properties": {**JOB_SCHEMA["properties"],
                                     "status": {"type": "object", "properties": _LIST_STATUS}}}

EVENT_SCHEMA = {
    "type": "object",
    "required": ["reason", "type", "note", "action", "eventTime", "regarding",
                 "reportingController", "reportingInstance"],
    "properties": {
        "reason": {"type": "string", "description": (
            "a transition's reason (" + ", ".join(str(r) for r in M.Reason) + "; a failed status write "
            "adds StatusUpdateFailed to it), or an event that is no transition: a retry ("
            + ", ".join(sorted(M.RETRY_REASONS)) + "; action Retry), " + str(M.EventReason.QUEUED)
            + " (action Queue), or a Warning saying what is off for the job, posted once ("
            + ", ".join(sorted(M.NOTICE_REASONS)) + ": image reuse and the verdict key, and why; action Notice)")},
        "type": {"type": "string", "enum": ["Normal", "Warning"]},
        "note": {"type": "string"}, "action": {"type": "string"}, "eventTime": {"type": "string"},
        "regarding": {"type": "object", "required": ["name", "uid"]},
        "reportingController": {"type": "string"}, "reportingInstance": {"type": "string"},
    },
}

TIMELINE_SCHEMA = {
    "type": "object",
    "required": ["name", "source", "phase", "terminal", "phases"],
    "properties": {
        "name": {"type": "string"},
        "source": {"type": "string", "enum": ["events", "transitions"]},
        "phase": {"type": "string"},
        "terminal": {"type": "boolean"},
        "phases": {"type": "array", "items": {
            "type": "object",
            "required": ["phase", "start", "durationSeconds", "current"],
            "properties": {"phase": {"type": "string"}, "start": {"type": "string"},
                           "end": {"type": ["string", "null"]}, "durationSeconds": {"type": "number"},
                           "reason": {"type": ["string", "null"]}, "current": {"type": "boolean"}}}},
    },
}

_SOURCE_SCHEMA = {
    "type": "object", "required": ["kind"],
    "description": "where the distribution came from (PEP 610 direct_url.json); credentials in URLs are ***",
    "properties": {"kind": {"type": "string", "enum": ["index", "url", "vcs", "local"]},
                   "url": {"type": "string"}, "path": {"type": "string"}, "editable": {"type": "boolean"},
                   "contentHash": {"type": "string", "description": "local: the content hash the environment's "
                                                                    "key uses"},
                   "vcs": {"type": "string"}, "commit": {"type": "string"},
                   "hashes": {"type": "object", "additionalProperties": {"type": "string"}}},
}

ENVIRONMENT_RECORD_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "takenAt", "environment", "tool"],
    "description": "The environment the job's kernel ran in, read with its own interpreter when the validation "
                   "started (environment_record.py); error instead of python/distributions when it could not be "
                   "read",
    "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string", "enum": ["EnvironmentRecord"]},
        "takenAt": {"type": "string"},
        "python": {"type": "object", "properties": {
            "version": {"type": "string"}, "implementation": {"type": "string"},
            "implementationVersion": {"type": "string"}, "platform": {"type": "string"},
            "machine": {"type": "string"}}},
        "distributions": {"type": "array", "maxItems": 5000, "items": {
            "type": "object", "required": ["name", "version", "source"],
            "properties": {"name": {"type": "string"}, "version": {"type": "string"}, "source": _SOURCE_SCHEMA}}},
        "environment": {"type": "object", "required": ["kind"], "properties": {
            "kind": {"type": "string", "enum": ["built", "interpreter"],
                     "description": "built: an environment built from the declared requirements; interpreter: "
                                    "the build was disabled"},
            "key": {"type": ["string", "null"]}, "strategy": {"type": ["string", "null"]},
            "baseInterpreter": {"type": ["string", "null"]}, "python": {"type": "string"},
            "requirements": {"type": ["array", "null"], "items": {"type": "string"}},
            "constraints": {"type": "array", "items": {"type": "string"}}}},
        "tool": {"type": "object", "properties": {"name": {"type": "string"}, "version": {"type": "string"},
                                                  "sources": {"type": "string"}}},
        "truncated": {"type": "object", "properties": {"distributions": {"type": "integer"},
                                                       "kept": {"type": "integer"}}},
        "error": {"type": "string"},
    },
}

_LISTED = {"type": "array", "items": {"type": "integer"}, "maxItems": 50}
_PKG_MOVE = {"type": "array", "maxItems": 50, "items": {"type": "object", "properties": {
    "name": {"type": "string"}, "version": {"type": "string"}, "from": {"type": "string"}, "to": {"type": "string"},
    "source": {"type": "string"}}}}

CHANGES_SCHEMA = {
    "type": "object",
    "required": ["since", "sentence"],
    "description": "What changed since the newest earlier Succeeded job of the same notebook (changes.py); "
                   "since is null when there is none",
    "properties": {
        "since": {"type": ["object", "null"], "properties": {"name": {"type": "string"},
                                                              "completionTime": {"type": ["string", "null"]}}},
        "sentence": {"type": "string", "description": "e.g. \"pandas 2.2.3 → 3.0.0; no cell changed\""},
        "cells": {"type": ["object", "null"], "description": "JupyterLab's cell numbers: removed as they were, "
                                                             "edited and added as they are now",
                  "properties": {"added": _LISTED, "removed": _LISTED, "edited": _LISTED,
                                 "changed": {"type": "boolean"}}},
        "golden": {"type": "boolean"},
        "requirements": {"type": "object", "properties": {"changed": {"type": "boolean"},
                                                          "lines": {"type": "array", "items": {"type": "string"}}}},
        "inputFiles": {"type": "object", "properties": {
            "added": {"type": "array", "items": {"type": "string"}},
            "removed": {"type": "array", "items": {"type": "string"}},
            "edited": {"type": "array", "items": {"type": "string"}}, "changed": {"type": "boolean"}}},
        "spec": {"type": "array", "items": {"type": "string"}, "description": "spec fields that differ"},
        "packages": {"type": ["object", "null"], "description": "null when either job has no environment record",
                     "properties": {"added": _PKG_MOVE, "removed": _PKG_MOVE, "upgraded": _PKG_MOVE,
                                    "downgraded": _PKG_MOVE, "changed": _PKG_MOVE,
                                    "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
                                    "changedAny": {"type": "boolean"}}},
        "python": {"type": ["object", "null"], "properties": {"from": {"type": "string"}, "to": {"type": "string"}}},
        "environmentChanged": {"type": ["boolean", "null"]},
    },
}

BISECTION_SCHEMA = {
    "type": "object",
    "required": ["job", "state", "maxSteps", "steps", "lines", "result"],
    "description": "A search for the package changes that turned a failed job red, run by the server "
                   "(bisect_runs.py; the same search as `jupyter nbvalidation bisect`)",
    "properties": {
        "job": {"type": "string", "description": "the failed job"},
        "state": {"type": "string", "enum": ["running", "finished", "stopped"]},
        "maxSteps": {"type": "integer"}, "startTime": {"type": "string"}, "completionTime": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "string"}, "description": "what the CLI would print so far"},
        "steps": {"type": "array", "items": {"type": "object", "properties": {
            "job": {"type": "string", "description": "the step's probe job"},
            "outcome": {"type": "string", "enum": ["pass", "fail", "unresolved"]},
            "text": {"type": "string"}, "phase": {"type": ["string", "null"]}, "reason": {"type": ["string", "null"]},
            "changes": {"type": "array", "items": {"type": "object"}}}}},
        "result": {"type": ["object", "null"], "description": "once it ended: what `bisect -o json` prints "
                   "(result: found, incomplete, not-found, notebook, old-environment-unbuildable, error, stopped; "
                   "culprits; message; exitCode)"},
    },
}

NOTIFICATION_SCHEMA = {
    "type": "object",
    "required": ["id", "event", "time", "state", "schedule", "job", "culprit", "changes", "deliveries", "seen"],
    "description": "A schedule's series that changed colour, as told to its owner (notify.py; docs/watching.md, "
                   "\"When it turns red\"); kept on the job",
    "properties": {
        "id": {"type": "string", "description": "the job's name"},
        "event": {"type": "string", "enum": ["turned-red", "infrastructure-failed", "back-to-green"]},
        "time": {"type": ["string", "null"]},
        "state": {"type": ["string", "null"], "enum": ["deciding", "sending", "sent", "undelivered", None],
                  "description": "sent: every webhook took it; undelivered: one did not after its tries"},
        "schedule": {"type": ["string", "null"]},
        "job": {"type": "object", "properties": {"name": {"type": "string"}, "notebook": {"type": ["string", "null"]},
                                                 "phase": {"type": ["string", "null"]},
                                                 "reason": {"type": ["string", "null"]}}},
        "culprit": {"type": ["object", "null"], "description": "turned-red only: kind commit (commit, commits: sha, "
                    "subject, files), packages (packages: name, from, to; search) or unknown; message"},
        "changes": {"type": ["object", "null"], "description": "turned-red only: the Changes since the last success"},
        "deliveries": {"type": "array", "items": {"type": "object", "properties": {
            "url": {"type": "string"}, "delivered": {"type": "boolean"}, "attempts": {"type": "integer"},
            "status": {"type": "integer"}, "error": {"type": "string"}, "id": {"type": "string"}}}},
        "seen": {"type": ["string", "null"], "description": "when its owner marked it seen"},
    },
}

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"},
        "field": {"type": ["string", "null"]}}}},
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): {"$ref": f"#/components/responses/E{c}"} for c in (*codes, 401, 403)}


NAME_PARAM = {"name": "name", "in": "path", "required": True, "description": "metadata.name of the job",
              "schema": {"type": "string", "minLength": 1}}


def openapi_document(base_url: str = "/") -> dict[str, Any]:
    prefix = base_url.rstrip("/") + "/nbvalidation/api/v1"
    job_ref = {"$ref": "#/components/schemas/Job"}
    return {
        "openapi": "3.0.3",
        "info": {"title": "jupyter-nbvalidation", "version": __version__,
                 "description": "Submit notebooks for build-then-validate jobs and follow their phases."},
        "servers": [{"url": prefix}],
        "security": [{"token": []}],
        "components": {
            "securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": "Authorization"}},
            "schemas": {"Spec": SPEC_SCHEMA, "Job": JOB_SCHEMA, "JobSummary": JOB_SUMMARY_SCHEMA, "Event": EVENT_SCHEMA,
                        "Timeline": TIMELINE_SCHEMA, "Error": ERROR_SCHEMA,
                        "EnvironmentRecord": ENVIRONMENT_RECORD_SCHEMA, "Changes": CHANGES_SCHEMA,
                        "Bisection": BISECTION_SCHEMA, "PartialSpec": PARTIAL_SPEC_SCHEMA,
                        "ProjectSettings": PROJECT_SETTINGS_SCHEMA, "Schedule": SCHEDULE_SCHEMA,
                        "Notification": NOTIFICATION_SCHEMA,
                        "Switch": {"type": "object", "required": ["enabled", "reason"], "properties": {
                            "enabled": {"type": "boolean"},
                            "reason": {"type": ["string", "null"], "description": "why it is off (plain-HTTP "
                                       "registry without registry_insecure, a base image without a digest, "
                                       "a lookup refused, the registry unreachable)"}}}},
            "responses": {f"E{c}": _json({"$ref": "#/components/schemas/Error"}, d) for c, d in {
                400: "Bad request", 401: "Not authenticated", 403: "Forbidden", 404: "Not found",
                409: "Conflict", 413: "Too large",
                415: "The body was not sent as Content-Type: application/json",
                501: "Not available on this backend"}.items()},
        },
        "paths": {
            "/jobs": {
                "get": {
                    "summary": "List jobs, newest first",
                    "parameters": [
                        {"name": "notebook", "in": "query", "schema": {"type": "string"}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
                        {"name": "continue", "in": "query", "schema": {"type": "string"},
                         "description": "metadata.continue of the previous page (opaque)"},
                        {"name": "schedule", "in": "query", "schema": {"type": "string"},
                         "description": "only the runs of this schedule of the caller's (as "
                                        "/schedules/{name}/jobs; an unknown one is a 404)"},
                        {"name": "probes", "in": "query", "schema": {"type": "boolean"},
                         "description": "true: also the probe jobs (bisect's steps, annotated "
                                        "nbvalidation.dev/probe-of), left out by default (a page may then "
                                        "hold fewer than limit jobs)"},
                    ],
                    "responses": {"200": _json({"type": "object", "required": ["items", "metadata"], "properties": {
                        "items": {"type": "array", "items": {"$ref": "#/components/schemas/JobSummary"}},
                        "metadata": {"type": "object", "properties": {"continue": {"type": ["string", "null"]}}},
                    }}, "A page of jobs"), **_errors(400, 404, 501)},
                },
                "post": {
                    "summary": "Submit a notebook (the notebook is read now; that snapshot is validated)",
                    "parameters": [
                        {"name": "probeOf", "in": "query", "schema": {"type": "string"},
                         "description": "the name of a job of the same notebook this job probes for (bisect's "
                                        "steps): annotated nbvalidation.dev/probe-of, it never stands as the "
                                        "notebook's verdict (not listed without probes=true, never the verdict "
                                        "cache's answer nor a last success)"},
                    ],
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Spec"}}}},
                    "responses": {"201": _json(job_ref, "The created job"), **_errors(400, 403, 404, 413, 415)},
                },
            },
            "/unchanged": {
                "post": {
                    "summary": "The verdict cache: the earlier Succeeded job whose verdict key (the spec, the "
                               "content of the notebook, golden copy, requirements and input files, the "
                               "environment, the runner) equals what this spec's inputs are now; null when there "
                               "is none. The spec is checked and the inputs read as for a submit; nothing is "
                               "created",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Spec"}}}},
                    "responses": {"200": _json({"type": "object", "required": ["job"], "properties": {
                        "job": {"oneOf": [job_ref, {"type": "null"}]}}}, "The earlier job, or null"),
                        **_errors(400, 403, 404, 413, 415)},
                },
            },
            "/project-settings": {
                "get": {
                    "summary": "The project settings that apply to a notebook: the nearest pyproject.toml "
                               "([tool.nbvalidation]) or nbvalidation.toml at or above its folder. A malformed "
                               "file is a 400 whose message names the file, the line and the key",
                    "parameters": [{"name": "notebook", "in": "query", "required": True, "schema": {"type": "string"},
                                    "description": "the notebook's path from the server root"}],
                    "responses": {"200": _json({"$ref": "#/components/schemas/ProjectSettings"}, "The settings"),
                                  **_errors(400, 404)},
                },
                "put": {
                    "summary": "Replace the notebook's own entry (glob = its path from the settings file's "
                               "folder) keeping every other byte of the file; options {} removes the entry. A bad "
                               "option is a 400 naming it, and nothing is written",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": {
                        "type": "object", "required": ["notebook", "options"], "additionalProperties": False,
                        "properties": {"notebook": {"type": "string"},
                                       "options": {"$ref": "#/components/schemas/PartialSpec"}}}}}},
                    "responses": {"200": _json({"$ref": "#/components/schemas/ProjectSettings"}, "The settings"),
                                  **_errors(400, 404, 409, 415)},
                },
            },
            "/jobs/{name}": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "One job", "responses": {"200": _json(job_ref, "The job"), **_errors(404)}},
                "delete": {"summary": "Delete a finished job with its events and files; a job not "
                                      "finished yet is cancelled instead (it ends Failed/Cancelled)",
                           "parameters": [{"name": "cancelOnly", "in": "query",
                                           "schema": {"type": "string", "enum": ["true", "false", "1", "0"]},
                                           "description": "true: only cancel; a finished job is left as it is"}],
                           "responses": {"200": _json({"type": "object"}, "Deleted (a Status), or with "
                                                      "cancelOnly the finished job"),
                                         "202": _json(job_ref, "Cancellation requested"), **_errors(400, 404)}},
            },
            "/jobs/{name}/events": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "The job's events, oldest first (events.k8s.io/v1 shape)",
                        "responses": {"200": _json({"type": "object", "required": ["items"], "properties": {
                            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}}}},
                            "Events"), **_errors(404)}},
            },
            "/jobs/{name}/timeline": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "Phases with start, end, duration and reason",
                        "responses": {"200": _json({"$ref": "#/components/schemas/Timeline"}, "Timeline"),
                                      **_errors(404)}},
            },
            "/jobs/{name}/notebook": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "The executed notebook",
                        "responses": {"200": _json({"type": "object"}, "nbformat 4 JSON"), **_errors(404)}},
            },
            "/jobs/{name}/buildlog": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "The environment build log: the part written so far while the build runs, "
                                   "the whole log afterwards",
                        "parameters": [{"name": "offset", "in": "query", "required": False,
                                        "description": "byte offset to start from (X-Build-Log-Next-Offset "
                                                       "of the previous answer)",
                                        "schema": {"type": "integer", "minimum": 0, "default": 0}}],
                        "responses": {"200": {"description": "Log text from the offset (while the build runs, "
                                                             "up to its last complete line)",
                                              "headers": {
                                                  "X-Build-Log-Complete": {
                                                      "description": "false while the build runs",
                                                      "schema": {"type": "string", "enum": ["true", "false"]}},
                                                  "X-Build-Log-Next-Offset": {
                                                      "description": "the byte offset to ask for next",
                                                      "schema": {"type": "integer", "minimum": 0}}},
                                              "content": {"text/plain": {"schema": {"type": "string"}}}},
                                      **_errors(400, 404)}},
            },
            "/jobs/{name}/environment": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "The environment the job's kernel ran in: Python, platform, every installed "
                                   "distribution with its exact version and source",
                        "responses": {"200": _json({"$ref": "#/components/schemas/EnvironmentRecord"},
                                                   "Environment record"), **_errors(404)}},
            },
            "/jobs/{name}/lock": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "The exact pins of the environment the job's kernel ran in, as a requirements "
                                   "file pip and uv install from (uv pip install -r): the option lines of its "
                                   "requirements, then every distribution at its version. 404 for a job that did "
                                   "not build its environment or has no record",
                        "responses": {"200": {"description": "requirements file",
                                              "content": {"text/plain": {"schema": {"type": "string"}}}},
                                      **_errors(404)}},
            },
            "/jobs/{name}/bisect": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "The search for the cause of a failed job's red started here (state, steps so far, "
                                   "result once finished)",
                        "responses": {"200": _json({"$ref": "#/components/schemas/Bisection"}, "Search"),
                                      **_errors(404)}},
                "post": {"summary": "Search which package changes since the notebook's last success turned this failed "
                                    "job red (what `jupyter nbvalidation bisect` does; each step a probe job). A search "
                                    "already running is answered as it is (200)",
                         "parameters": [{"name": "maxSteps", "in": "query", "required": False,
                                         "description": "at most this many validations (default 12)",
                                         "schema": {"type": "integer", "minimum": 1, "maximum": 50}}],
                         "responses": {"202": _json({"$ref": "#/components/schemas/Bisection"}, "Started"),
                                       "200": _json({"$ref": "#/components/schemas/Bisection"}, "Already running"),
                                       **_errors(400, 404, 409)}},
                "delete": {"summary": "Stop the search (its running step's job cancelled)",
                           "responses": {"200": _json({"$ref": "#/components/schemas/Bisection"}, "Stopped"),
                                         **_errors(404)}},
            },
            "/jobs/{name}/changes": {
                "parameters": [NAME_PARAM],
                "get": {"summary": "What changed since the notebook's last success: cells, golden, requirements, "
                                   "input files, options, packages, Python",
                        "responses": {"200": _json({"$ref": "#/components/schemas/Changes"}, "Changes"),
                                      **_errors(404)}},
            },
            "/notifications": {
                "get": {"summary": "The caller's notifications (a schedule's series that turned red, failed for "
                                   "infrastructure, or came back to green), newest first",
                        "parameters": [{"name": "limit", "in": "query", "required": False,
                                        "description": "at most this many (default 50)",
                                        "schema": {"type": "integer", "minimum": 1, "maximum": 500}}],
                        "responses": {"200": _json({"type": "object", "required": ["items", "unseen"], "properties": {
                            "kind": {"type": "string"},
                            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Notification"}},
                            "unseen": {"type": "integer"}}}, "Notifications"), **_errors(400)}},
            },
            "/notifications/{name}/seen": {
                "parameters": [NAME_PARAM],
                "post": {"summary": "Mark the job's notification seen",
                         "responses": {"200": _json({"$ref": "#/components/schemas/Notification"}, "Notification"),
                                       **_errors(404)}},
            },
            "/health": {
                "get": {"summary": "Active backend and whether it is usable",
                        "responses": {"200": _json({"type": "object", "required": ["backend", "usable"], "properties": {
                            "registryReachable": {"type": "boolean", "description": "kubernetes, with a registry: "
                                                  "it answers GET /v2/ (probed within 3 s, cached 5 s); false "
                                                  "makes usable false"},
                            "registryProblem": {"type": ["string", "null"], "description": "why it does not answer"},
                            "imageReuse": {"$ref": "#/components/schemas/Switch"},
                            "verdictKey": {"$ref": "#/components/schemas/Switch"},
                            "sandbox": {"description": "local: whether kernels run in the sandbox "
                                        "(LocalBackend.sandbox; null until detected at start)", "oneOf": [
                                {"type": "null"},
                                {"type": "object", "required": ["enabled", "mode", "uses", "reason"], "properties": {
                                    "enabled": {"type": "boolean", "description": "kernels run in the sandbox"},
                                    "mode": {"type": "string", "enum": ["auto", "off"]},
                                    "uses": {"type": "array", "items": {"type": "string"},
                                             "description": "the protections active here, e.g. user namespace, "
                                                            "pid namespace, mount namespace, no capabilities, "
                                                            "links resolved in the kernel's view, read-only "
                                                            "mounts, landlock (writes, ABI 7), unprivileged "
                                                            "uid (nobody, idmapped mounts)"},
                                    "missing": {"type": "array", "items": {"type": "string"},
                                                "description": "the protections this system cannot give, each "
                                                               "with what that leaves open (also warned at start)"},
                                    "reason": {"type": ["string", "null"],
                                               "description": "why it is off (null when enabled)"},
                                    "landlockAbi": {"type": ["integer", "null"],
                                                    "description": "the Linux kernel's Landlock ABI (null: "
                                                                   "none; writes then confined by read-only "
                                                                   "mounts only)"},
                                    "idmapRefused": {"type": ["string", "null"],
                                                     "description": "a root server only: the path (and the "
                                                                    "error) where idmapped mounts are refused, so "
                                                                    "its runs are refused rather than run as root "
                                                                    "(null: they work, or not root)"},
                                    "network": {"type": "object", "description": "LocalBackend.network: "
                                                "whether each run has a network of its own",
                                                "required": ["mode", "isolated", "outbound", "reason"],
                                                "properties": {
                                                    "mode": {"type": "string", "enum": ["auto", "none", "host"]},
                                                    "isolated": {"type": "boolean", "description": "a network "
                                                                 "namespace per run: the host's loopback is "
                                                                 "not reachable"},
                                                    "outbound": {"type": "string", "description": "how a run "
                                                                 "reaches out: slirp4netns, none, or host (the "
                                                                 "host's network, loopback included)"},
                                                    "reason": {"type": ["string", "null"], "description":
                                                               "what is left open (null when isolated)"},
                                                    "probeSeconds": {"type": ["number", "null"]}}}}}]},
                            "bounds": {"description": "local: how a run's bounds are held (null until detected "
                                       "at start)", "oneOf": [
                                {"type": "null"},
                                {"type": "object", "required": ["memory", "reason", "runDiskLimit"], "properties": {
                                    "memory": {"type": "string", "enum": ["cgroup v2", "cgroup v1", "RLIMIT_AS"],
                                               "description": "what holds podConfig.resources.limits.memory"},
                                    "reason": {"type": ["string", "null"],
                                               "description": "why no memory cgroup (null with one)"},
                                    "runDiskLimit": {"type": "integer",
                                                     "description": "LocalBackend.run_disk_limit (0: none)"}}}]},
                            "kernelPool": {"description": "local: the pre-started kernels (LocalBackend.kernel_pool_*; "
                                           "null until start)", "oneOf": [
                                {"type": "null"},
                                {"type": "object", "properties": {
                                    "size": {"type": "integer"}, "max": {"type": "integer"},
                                    "idleTtl": {"type": "number"},
                                    "slots": {"type": "integer", "description": "pre-started kernels held now"},
                                    "ready": {"type": "integer", "description": "of them, started and waiting"},
                                    "keys": {"type": "integer", "description": "environments they are kept for"},
                                    "started": {"type": "integer"},
                                    "taken": {"type": "integer", "description": "runs that used one"},
                                    "missed": {"type": "integer",
                                               "description": "runs that found none and started their own"},
                                    "expected": {"type": ["integer", "null"],
                                                 "description": "the runs this engine will start in all, where "
                                                                "known (LocalBackend.kernel_pool_runs_expected)"}}}]}}},
                                                   "Health"), **_errors()}},
            },
            **schedule_paths(_json, _errors),
            "/openapi.json": {
                "get": {"summary": "This document",
                        "responses": {"200": _json({"type": "object"}, "OpenAPI"), **_errors()}},
            },
        },
    }
