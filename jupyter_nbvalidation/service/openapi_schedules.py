"""The schedules' part of the OpenAPI document (openapi.py merges it): the
``NotebookValidationSchedule`` schema and the ``/schedules`` paths (service/schedules.py)."""

from __future__ import annotations

from typing import Any, Callable

SCHEDULE_NAME_PARAM = {"name": "name", "in": "path", "required": True, "description": "metadata.name of the schedule",
                       "schema": {"type": "string", "minLength": 1}}

_RUN = {"type": "object", "required": ["job", "phase"], "properties": {
    "job": {"type": "string", "description": "the run's job"},
    "phase": {"type": "string", "description": "its phase (Pending before the engine took it)"},
    "reason": {"type": ["string", "null"]},
    "commit": {"type": ["string", "null"], "description": "the commit it validated (a notebook from git)"},
    "finished": {"type": ["string", "null"], "description": "its completionTime"}}}

SCHEDULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["metadata", "spec"],
    "additionalProperties": False,
    "description": "A job spec validated on a cron expression, in a Kubernetes CronJob's words. An unknown field "
                   "anywhere is a 400 naming it",
    "properties": {
        "apiVersion": {"type": "string", "enum": ["nbvalidation.dev/v1alpha1"]},
        "kind": {"type": "string", "enum": ["NotebookValidationSchedule"]},
        "metadata": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$",
                     "description": "a DNS label of at most 52 characters; a user's names are their own"},
            "uid": {"type": "string", "readOnly": True}, "creationTimestamp": {"type": "string", "readOnly": True},
            "resourceVersion": {"type": "string", "readOnly": True}}},
        "spec": {"type": "object", "required": ["schedule", "jobTemplate"], "additionalProperties": False,
                 "properties": {
                     "schedule": {"type": "string", "description": "five cron fields (minute hour day-of-month "
                                  "month day-of-week) in UTC, or @hourly, @daily, @weekly, @monthly, @yearly"},
                     "suspend": {"type": "boolean", "default": False, "description": "paused: no tick runs (a "
                                 "trigger still does); resumed, the ticks missed while paused are not caught up"},
                     "concurrencyPolicy": {"type": "string", "enum": ["Forbid"], "default": "Forbid",
                                           "description": "never two runs at once: a tick that finds the last "
                                                          "run still going is skipped and counted "
                                                          "(status.skipped); Allow and Replace are refused"},
                     "jobTemplate": {"type": "object", "required": ["spec"], "additionalProperties": False,
                                     "properties": {"spec": {"$ref": "#/components/schemas/Spec"}},
                                     "description": "checked at create by the checks a submit runs: a bad one is "
                                                    "a 400 naming spec.jobTemplate.spec.<field>"},
                     "successfulJobsHistoryLimit": {"type": "integer", "minimum": 0, "maximum": 1000, "default": 10,
                                                    "description": "Succeeded runs kept (older ones are deleted)"},
                     "failedJobsHistoryLimit": {"type": "integer", "minimum": 0, "maximum": 1000, "default": 10,
                                                "description": "Failed runs kept"}}},
        "status": {"type": "object", "readOnly": True, "properties": {
            "lastScheduleTime": {"type": ["string", "null"], "description": "when its last run was submitted"},
            "lastTickTime": {"type": ["string", "null"], "description": "the last tick looked at (run or skipped)"},
            "nextScheduleTime": {"type": ["string", "null"], "description": "the next tick (null while suspended)"},
            "active": {"type": ["string", "null"], "description": "the job of the run still going, else null"},
            "skipped": {"type": "integer", "description": "ticks skipped because a run was still going"},
            "message": {"type": ["string", "null"], "description": "why the last tick did not run, if it did not"},
            "recent": {"type": "array", "maxItems": 10, "items": _RUN,
                       "description": "the last runs, newest first (the lab's strip of verdicts)"}}},
    },
}


def schedule_paths(json_body: Callable[[dict[str, Any], str], dict[str, Any]],
                   errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The ``/schedules`` paths, with openapi.py's response helpers."""
    ref = {"$ref": "#/components/schemas/Schedule"}
    job_list = {"type": "object", "required": ["items"], "properties": {
        "items": {"type": "array", "items": {"$ref": "#/components/schemas/JobSummary"}}}}
    refused = "a 501 on a backend whose store cannot hold schedules (Kubernetes, for now)"
    return {
        "/schedules": {
            "get": {"summary": f"The caller's schedules, by name ({refused})",
                    "responses": {"200": json_body({"type": "object", "required": ["items"], "properties": {
                        "items": {"type": "array", "items": ref}}}, "Schedules"), **errors(501)}},
            "post": {"summary": "Create a schedule: its fields and its job template checked (a 400 naming the "
                                "field; nothing stored); its first tick is the first after now",
                     "requestBody": {"required": True, "content": {"application/json": {"schema": ref}}},
                     "responses": {"201": json_body(ref, "The schedule"), **errors(400, 404, 409, 413, 415, 501)}},
        },
        "/schedules/{name}": {
            "parameters": [SCHEDULE_NAME_PARAM],
            "get": {"summary": "One schedule with its status (next tick, active run, recent verdicts)",
                    "responses": {"200": json_body(ref, "The schedule"), **errors(404, 501)}},
            "patch": {"summary": "Pause or resume: {\"spec\": {\"suspend\": true|false}} (nothing else changes in "
                                 "place)",
                      "requestBody": {"required": True, "content": {"application/json": {"schema": {
                          "type": "object", "required": ["spec"], "additionalProperties": False, "properties": {
                              "spec": {"type": "object", "required": ["suspend"], "additionalProperties": False,
                                       "properties": {"suspend": {"type": "boolean"}}}}}}}},
                      "responses": {"200": json_body(ref, "The schedule"), **errors(400, 404, 409, 415, 501)}},
            "delete": {"summary": "Delete the schedule; its jobs stay",
                       "responses": {"200": json_body({"type": "object"}, "Deleted (a Status)"), **errors(404, 501)}},
        },
        "/schedules/{name}/trigger": {
            "parameters": [SCHEDULE_NAME_PARAM],
            "post": {"summary": "Run now, through the submit path (a 409 while its last run still goes)",
                     "responses": {"201": json_body({"$ref": "#/components/schemas/Job"}, "The run's job"),
                                   **errors(400, 404, 409, 501)}},
        },
        "/schedules/{name}/jobs": {
            "parameters": [SCHEDULE_NAME_PARAM],
            "get": {"summary": "The schedule's runs, newest first (also GET /jobs?schedule=NAME): the jobs "
                               "labelled nbvalidation.dev/schedule=NAME of its owner",
                    "parameters": [{"name": "limit", "in": "query",
                                    "schema": {"type": "integer", "minimum": 1, "maximum": 500}}],
                    "responses": {"200": json_body(job_list, "Its runs"), **errors(400, 404, 501)}},
        },
    }
