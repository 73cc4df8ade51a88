/**
 * The validation panel's state and its transitions (pure): which jobs are
 * known, which are shown (this notebook / all notebooks), which one is
 * selected, and how a live job event is merged before the follow-up GET.
 */
import { isTerminal, phaseRank } from './phases';
import { parseTime } from './format';
import type { IJob, IJobEvent, ILiveJobEvent } from './types';
import { NOTICE_REASONS, RETRY_REASONS } from './vocabulary';

export type Scope = 'notebook' | 'all';

export interface IPanelState {
  scope: Scope;
  /** path (relative to the server root) of the active notebook, if any */
  notebookPath: string | null;
  /** every job we know of, newest first */
  jobs: IJob[];
  /** name of the selected job */
  selected: string | null;
  /** true once the user picked a job by hand (keeps it across refreshes) */
  pinned: boolean;
  /** events per job name, time order */
  events: Record<string, IJobEvent[]>;
}

export function initialState(scope: Scope = 'notebook'): IPanelState {
  return { scope, notebookPath: null, jobs: [], selected: null, pinned: false, events: {} };
}

export function jobNotebook(job: IJob): string {
  return job.spec?.notebook?.path ?? '';
}

export function jobPhase(job: IJob): string {
  return job.status?.phase ?? '';
}

function jobTime(job: IJob): number {
  return parseTime(job.metadata?.creationTimestamp) ?? parseTime(job.status?.startTime) ?? 0;
}

/** Newest first; ties broken by name so the order is stable. */
export function sortJobs(jobs: readonly IJob[]): IJob[] {
  return [...jobs].sort(
    (a, b) => jobTime(b) - jobTime(a) || (a.metadata.name < b.metadata.name ? 1 : -1)
  );
}

/**
 * Of two copies of the same job keep the more advanced one: phases only move
 * forward, so a copy in an earlier phase is stale (a list fetched before a
 * live event arrived). Equal phase: the incoming copy wins.
 */
export function newerJob(existing: IJob | undefined, incoming: IJob): IJob {
  if (!existing) {
    return incoming;
  }
  if (isListSummary(incoming) && !isListSummary(existing) && sameVersion(existing, incoming)) {
    return existing; // a list's summary of the very job we hold whole: keep its cell results
  }
  const before = jobPhase(existing);
  const after = jobPhase(incoming);
  if (isTerminal(before) && !isTerminal(after)) {
    return existing;
  }
  if (
    !isTerminal(after) &&
    phaseRank(after || 'Initializing') < phaseRank(before || 'Initializing')
  ) {
    return existing;
  }
  return incoming;
}

/** A job as GET /jobs lists it: status.resultsSummary in place of status.results. */
export function isListSummary(job: IJob): boolean {
  return !!job.status?.resultsSummary && job.status.results === undefined;
}

function sameVersion(a: IJob, b: IJob): boolean {
  const va = a.metadata.resourceVersion;
  const vb = b.metadata.resourceVersion;
  if (va !== undefined || vb !== undefined) {
    return va === vb;
  }
  return jobPhase(a) === jobPhase(b) && a.status?.completionTime === b.status?.completionTime;
}

/**
 * Merge jobs fetched from the server. `authoritativeFor` says which set the
 * response is complete for — a notebook path, 'all', or null (single jobs) —
 * so jobs that vanished from it (deleted, expired) are dropped.
 */
export function mergeJobs(
  state: IPanelState,
  incoming: readonly IJob[],
  authoritativeFor: string | 'all' | null = null
): IPanelState {
  const byName = new Map<string, IJob>();
  const incomingNames = new Set(incoming.map(j => j.metadata.name));
  for (const job of state.jobs) {
    const covered =
      authoritativeFor === 'all' ||
      (authoritativeFor !== null && jobNotebook(job) === authoritativeFor);
    if (covered && !incomingNames.has(job.metadata.name)) {
      continue;
    }
    byName.set(job.metadata.name, job);
  }
  for (const job of incoming) {
    byName.set(job.metadata.name, newerJob(byName.get(job.metadata.name), job));
  }
  const jobs = sortJobs([...byName.values()]);
  const events = { ...state.events };
  for (const name of Object.keys(events)) {
    if (!byName.has(name)) {
      delete events[name];
    }
  }
  return ensureSelection(followNewest(state, { ...state, jobs, events }));
}

/**
 * The panel follows the newest job of the current notebook, whoever started
 * it (this tab, another tab, the magic, the CLI): when a job the panel did
 * not know before becomes that notebook's newest, it is selected, even over
 * a job picked by hand.
 */
export function followNewest(before: IPanelState, after: IPanelState): IPanelState {
  const path = after.notebookPath;
  if (!path) {
    return after;
  }
  const newest = latestJobFor(after.jobs, path);
  if (!newest || newest.metadata.name === after.selected) {
    return after;
  }
  if (before.jobs.some(j => j.metadata.name === newest.metadata.name)) {
    return after; // not new: a selection made by hand stays
  }
  return { ...after, selected: newest.metadata.name, pinned: false };
}

/** The jobs the list shows for the current scope and notebook. */
export function visibleJobs(state: IPanelState): IJob[] {
  if (state.scope === 'all') {
    return state.jobs;
  }
  if (!state.notebookPath) {
    return [];
  }
  return state.jobs.filter(j => jobNotebook(j) === state.notebookPath);
}

/** Keep the selection when it is still shown; else pick the newest shown job. */
export function ensureSelection(state: IPanelState): IPanelState {
  const shown = visibleJobs(state);
  if (state.selected && shown.some(j => j.metadata.name === state.selected)) {
    return state;
  }
  const selected = shown.length ? shown[0].metadata.name : null;
  return { ...state, selected, pinned: false };
}

export function selectJob(state: IPanelState, name: string | null): IPanelState {
  return { ...state, selected: name, pinned: name !== null };
}

export function setScope(state: IPanelState, scope: Scope): IPanelState {
  return ensureSelection({ ...state, scope });
}

/**
 * The active notebook changed. An unpinned selection follows it to that
 * notebook's newest job.
 */
export function setNotebook(state: IPanelState, path: string | null): IPanelState {
  if (path === state.notebookPath) {
    return state;
  }
  let next: IPanelState = { ...state, notebookPath: path };
  if (!state.pinned || state.scope === 'notebook') {
    const shown = visibleJobs(next);
    next = { ...next, selected: shown.length ? shown[0].metadata.name : null, pinned: false };
  }
  return ensureSelection(next);
}

/** A job just created by this frontend: add it and select it. */
export function addSubmittedJob(state: IPanelState, job: IJob): IPanelState {
  const merged = mergeJobs(state, [job], null);
  return { ...merged, selected: job.metadata.name, pinned: true };
}

export function setEvents(
  state: IPanelState,
  name: string,
  events: readonly IJobEvent[]
): IPanelState {
  const sorted = [...events]
    .map((e, i) => ({ e, i }))
    .sort((a, b) => (parseTime(a.e.eventTime) ?? 0) - (parseTime(b.e.eventTime) ?? 0) || a.i - b.i)
    .map(x => x.e);
  return { ...state, events: { ...state.events, [name]: sorted } };
}

export function selectedJob(state: IPanelState): IJob | null {
  return state.jobs.find(j => j.metadata.name === state.selected) ?? null;
}

export interface ILiveMerge {
  state: IPanelState;
  /** the event names a job we know */
  known: boolean;
  /** the panel should fetch (job + events, or the list) for this event */
  relevant: boolean;
}

/**
 * Merge a live job event (jupyter_events data) at once, before the GETs it
 * triggers return: the known job's phase, reason and message move forward and
 * the transition is appended to status.transitions so the timeline shows it.
 * A retry event (ValidationRetried, BuildRetried) is no transition: it changes
 * nothing here (the GETs it triggers bring the retry counters and message);
 * nor does a notice (ImageReuseOff), which changes no status.
 */
export function applyLiveEvent(state: IPanelState, ev: ILiveJobEvent): ILiveMerge {
  const idx = state.jobs.findIndex(j => j.metadata.name === ev.name);
  const matchesScope =
    state.scope === 'all' || (!!ev.notebook && ev.notebook === state.notebookPath);
  if (idx < 0) {
    return { state, known: false, relevant: matchesScope };
  }
  if (
    ev.reason !== undefined &&
    (RETRY_REASONS.includes(ev.reason) || NOTICE_REASONS.includes(ev.reason))
  ) {
    return { state, known: true, relevant: true };
  }
  const job = state.jobs[idx];
  const status = { ...(job.status ?? {}) };
  const current = status.phase ?? '';
  if (
    ev.phase &&
    !isTerminal(current) &&
    phaseRank(ev.phase) >= phaseRank(current || 'Initializing')
  ) {
    status.phase = ev.phase;
    if (ev.reason !== undefined) {
      status.reason = ev.reason;
    }
    if (ev.message !== undefined) {
      status.message = ev.message;
    }
    const transitions = [...(status.transitions ?? [])];
    if (ev.time && !transitions.some(t => t.phase === ev.phase)) {
      transitions.push({
        phase: ev.phase,
        reason: ev.reason ?? '',
        message: ev.message ?? '',
        time: ev.time
      });
    }
    status.transitions = transitions;
  }
  const jobs = [...state.jobs];
  jobs[idx] = { ...job, status };
  return { state: { ...state, jobs }, known: true, relevant: true };
}

/** The newest job of a notebook (its verdict goes to the status bar). */
export function latestJobFor(jobs: readonly IJob[], path: string | null): IJob | null {
  if (!path) {
    return null;
  }
  return sortJobs(jobs.filter(j => jobNotebook(j) === path))[0] ?? null;
}

/** Whether any shown job still runs (drives the 1 s tick and safety poll). */
export function anyRunning(jobs: readonly IJob[]): boolean {
  return jobs.some(j => !isTerminal(jobPhase(j)));
}

/**
 * A job opened by name (a schedule's run: its notebook may be none of the open ones, or come
 * from git): the list shows all notebooks, and the job is selected as if picked by hand.
 */
export function openJob(state: IPanelState, job: IJob): IPanelState {
  return addSubmittedJob({ ...state, scope: 'all' }, job);
}
