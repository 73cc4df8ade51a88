"""``/metrics`` of the team's service, in the Prometheus text format (prometheus-client): what a
team's admin watches. Read from the store at each scrape (the jobs are the truth, whichever
engine ran them), plus the counters of this process:

- ``nbvalidation_jobs{phase,reason}``: the jobs kept, by phase and status reason;
- ``nbvalidation_queue_depth{owner}``: each user's jobs waiting for a slot;
- ``nbvalidation_active_jobs{owner}``: each user's jobs not ended;
- ``nbvalidation_validation_duration_seconds{verdict}``, ``nbvalidation_build_duration_seconds{outcome}``:
  histograms of the ended runs and builds (from ``status.transitions``);
- ``nbvalidation_retries_total{cause}``: retries after a fault that was not the notebook's, by
  what was retried (``validation``, ``build``);
- ``nbvalidation_verdict_cache_{questions,hits}_total``: the verdict cache asked through this service."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import Phase, is_terminal, parse_time
from jupyter_nbvalidation.service.tenancy import RUNNING_PHASES
from jupyter_nbvalidation.store.base import JobStore, owner_of

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
PAGE = 500


@dataclass
class Counters:
    """What this process counts that the store does not keep."""

    cache_questions: int = 0
    cache_hits: int = 0
    extra: dict[str, int] = field(default_factory=dict)


async def all_jobs(store: JobStore) -> list[Job]:
    jobs: list[Job] = []
    token = None
    while True:
        page, token = await store.list_jobs(limit=PAGE, continue_token=token)
        jobs += page
        if not token:
            return jobs


def _entered(job: Job) -> dict[str, float]:
    """When the job first entered each phase (epoch seconds)."""
    out: dict[str, float] = {}
    for t in (job.get("status") or {}).get("transitions") or []:
        when = parse_time(t.get("time"))
        if when is not None and t.get("phase") not in out:
            out[str(t.get("phase"))] = when.timestamp()
    return out


def _histogram(name: str, doc: str, label: str, samples: dict[str, list[float]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=[label])
    for value, durations in sorted(samples.items()):
        buckets = [(str(b), float(sum(1 for d in durations if d <= b))) for b in DURATION_BUCKETS]
        buckets.append(("+Inf", float(len(durations))))
        family.add_metric([value], buckets, sum_value=sum(durations))
    return family


def families(jobs: Iterable[Job], counters: Counters) -> list[Metric]:
    """The metric families of ``jobs`` (pure)."""
    by_phase: dict[tuple[str, str], int] = {}
    queued: dict[str, int] = {}
    active: dict[str, int] = {}
    verdicts: dict[str, list[float]] = {}
    builds: dict[str, list[float]] = {}
    retries = {"validation": 0, "build": 0}
    for job in jobs:
        st = job.get("status") or {}
        phase, reason = st.get("phase") or "Pending", st.get("reason") or ""
        by_phase[(phase, reason)] = by_phase.get((phase, reason), 0) + 1
        owner = owner_of(job) or ""
        if not is_terminal(phase):
            active[owner] = active.get(owner, 0) + 1
            if phase not in RUNNING_PHASES:
                queued[owner] = queued.get(owner, 0) + 1
        retries["validation"] += int(st.get("validationRetries") or 0)
        retries["build"] += int(st.get("buildRetries") or 0)
        entered = _entered(job)
        if is_terminal(phase) and Phase.VALIDATION_RUNNING in entered and phase in entered:
            verdicts.setdefault(phase, []).append(max(0.0, entered[phase] - entered[Phase.VALIDATION_RUNNING]))
        if Phase.BUILDING in entered:
            end = entered.get(Phase.BUILD_COMPLETE)
            outcome = "Succeeded"
            if end is None and phase == Phase.FAILED and Phase.VALIDATION_RUNNING not in entered:
                end, outcome = entered.get(Phase.FAILED), "Failed"
            if end is not None:
                builds.setdefault(outcome, []).append(max(0.0, end - entered[Phase.BUILDING]))
    jobs_family = GaugeMetricFamily("nbvalidation_jobs", "Jobs kept, by phase and status reason.",
                                    labels=["phase", "reason"])
    for (phase, reason), n in sorted(by_phase.items()):
        jobs_family.add_metric([phase, reason], n)
    depth = GaugeMetricFamily("nbvalidation_queue_depth", "Jobs of each user waiting for a slot.", labels=["owner"])
    for owner, n in sorted(queued.items()):
        depth.add_metric([owner], n)
    active_family = GaugeMetricFamily("nbvalidation_active_jobs", "Jobs of each user not ended.", labels=["owner"])
    for owner, n in sorted(active.items()):
        active_family.add_metric([owner], n)
    retried = CounterMetricFamily("nbvalidation_retries", "Retries after a fault that was not the notebook's, "
                                  "by what was retried.", labels=["cause"])
    for cause, n in sorted(retries.items()):
        retried.add_metric([cause], n)
    questions = CounterMetricFamily("nbvalidation_verdict_cache_questions", "Verdict cache questions (unchanged) "
                                    "answered by this service process.")
    questions.add_metric([], counters.cache_questions)
    hits = CounterMetricFamily("nbvalidation_verdict_cache_hits", "Verdict cache questions answered with an "
                               "earlier verdict by this service process.")
    hits.add_metric([], counters.cache_hits)
    return [jobs_family, depth, active_family,
            _histogram("nbvalidation_validation_duration_seconds", "Seconds from ValidationRunning to the verdict, "
                       "by verdict.", "verdict", verdicts),
            _histogram("nbvalidation_build_duration_seconds", "Seconds a build took, by outcome.", "outcome", builds),
            retried, questions, hits]


class _Snapshot:
    def __init__(self, metrics: list[Metric]):
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def render(jobs: list[Job], counters: Counters) -> bytes:
    """The exposition text (blocking: run it in a thread for a large store)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families(jobs, counters)))
    return generate_latest(registry)

