/**
 * The phase timeline of one job, computed from its Events (preferred) or,
 * when those have expired, from status.transitions (design §3.7). Pure: the
 * panel calls it on every tick with `now` so the current phase grows live.
 */
import { isTerminal, phaseOfReason, phaseRank } from './phases';
import { parseTime } from './format';
import type { IJob, IJobEvent, ITransition } from './types';

export type TimelineSource = 'events' | 'transitions' | 'status' | 'none';

/** One phase entered at `time`, as read from an Event or a transition. */
export interface IPhaseEntry {
  phase: string;
  time: number;
  reason: string;
  message: string;
  type: string;
}

export interface ITimelinePhase extends IPhaseEntry {
  /** ms since the epoch */
  start: number;
  /** ms since the epoch; null while the phase is current */
  end: number | null;
  durationSeconds: number;
  /** the non-terminal phase the job is in now (its bar grows) */
  current: boolean;
  /** Failed itself, or the phase that ended in Failed */
  failed: boolean;
  terminal: boolean;
}

export interface ITimeline {
  source: TimelineSource;
  phases: ITimelinePhase[];
  terminal: boolean;
  /** 'Succeeded' | 'Failed' once terminal, else null */
  verdict: string | null;
  /** the phase the job is in (last entry), or null without data */
  currentPhase: string | null;
  axisStart: number;
  axisEnd: number;
}

/**
 * Keep the first entry of each phase, in time order, and nothing after the
 * first terminal phase (phases never go back, terminal is never left).
 */
function normalise(entries: IPhaseEntry[]): IPhaseEntry[] {
  const sorted = entries
    .map((e, i) => ({ e, i }))
    .sort((a, b) => a.e.time - b.e.time || a.i - b.i)
    .map(x => x.e);
  const out: IPhaseEntry[] = [];
  const seen = new Set<string>();
  for (const e of sorted) {
    if (seen.has(e.phase)) {
      continue;
    }
    const last = out[out.length - 1];
    if (last && phaseRank(e.phase) < phaseRank(last.phase)) {
      // An out-of-order straggler for an earlier phase: ignore it.
      continue;
    }
    seen.add(e.phase);
    out.push(e);
    if (isTerminal(e.phase)) {
      break;
    }
  }
  return out;
}

/** Phase entries recorded by a job's Events. */
export function entriesFromEvents(events: readonly IJobEvent[] | undefined | null): IPhaseEntry[] {
  const entries: IPhaseEntry[] = [];
  for (const ev of events ?? []) {
    const phase = ev.phase && phaseRank(ev.phase) < 6 ? ev.phase : phaseOfReason(ev.reason);
    const time = parseTime(ev.eventTime);
    if (!phase || time === null) {
      continue;
    }
    entries.push({
      phase,
      time,
      reason: ev.reason ?? '',
      message: ev.note ?? '',
      type: ev.type ?? (phase === 'Failed' ? 'Warning' : 'Normal')
    });
  }
  return normalise(entries);
}

/** Phase entries recorded in status.transitions. */
export function entriesFromTransitions(
  transitions: readonly ITransition[] | undefined | null
): IPhaseEntry[] {
  const entries: IPhaseEntry[] = [];
  for (const t of transitions ?? []) {
    const time = parseTime(t.time);
    if (!t.phase || time === null) {
      continue;
    }
    entries.push({
      phase: t.phase,
      time,
      reason: t.reason ?? '',
      message: t.message ?? '',
      type: t.phase === 'Failed' ? 'Warning' : 'Normal'
    });
  }
  return normalise(entries);
}

/** A single entry from status alone, when there is no history at all. */
function entriesFromStatus(job: IJob | undefined | null): IPhaseEntry[] {
  const phase = job?.status?.phase;
  if (!phase) {
    return [];
  }
  const time =
    parseTime(isTerminal(phase) ? job?.status?.completionTime : undefined) ??
    parseTime(job?.status?.startTime) ??
    parseTime(job?.metadata?.creationTimestamp);
  if (time === null) {
    return [];
  }
  return [
    {
      phase,
      time,
      reason: job?.status?.reason ?? '',
      message: job?.status?.message ?? '',
      type: phase === 'Failed' ? 'Warning' : 'Normal'
    }
  ];
}

/**
 * Choose the history: Events when they cover every phase the status history
 * knows (they carry the notes and types), else status.transitions (Events
 * expired or lag behind), else whatever exists.
 */
export function chooseEntries(
  events: readonly IJobEvent[] | undefined | null,
  job: IJob | undefined | null
): { source: TimelineSource; entries: IPhaseEntry[] } {
  const fromEvents = entriesFromEvents(events);
  const fromStatus = entriesFromTransitions(job?.status?.transitions);
  const phasesInEvents = new Set(fromEvents.map(e => e.phase));
  const covers = fromStatus.every(t => phasesInEvents.has(t.phase));
  if (fromEvents.length && covers) {
    return { source: 'events', entries: fromEvents };
  }
  if (fromStatus.length) {
    return { source: 'transitions', entries: fromStatus };
  }
  const fromJob = entriesFromStatus(job);
  if (fromJob.length) {
    return { source: 'status', entries: fromJob };
  }
  return { source: 'none', entries: [] };
}

/** The timeline at time `now` (ms since the epoch). */
export function computeTimeline(
  events: readonly IJobEvent[] | undefined | null,
  job: IJob | undefined | null,
  now: number
): ITimeline {
  const { source, entries } = chooseEntries(events, job);
  const phases: ITimelinePhase[] = entries.map((e, i) => {
    const next = entries[i + 1];
    const terminal = isTerminal(e.phase);
    let end: number | null;
    if (next) {
      end = next.time;
    } else if (terminal) {
      end = e.time;
    } else {
      end = null;
    }
    const until = end ?? Math.max(now, e.time);
    return {
      ...e,
      start: e.time,
      end,
      durationSeconds: Math.max(0, until - e.time) / 1000,
      current: !next && !terminal,
      failed: e.phase === 'Failed' || next?.phase === 'Failed',
      terminal
    };
  });
  const last = phases[phases.length - 1];
  const terminal = !!last && last.terminal;
  const axisStart = phases.length ? phases[0].start : now;
  const axisEnd = !last ? now : terminal ? last.start : Math.max(now, last.start);
  return {
    source,
    phases,
    terminal,
    verdict: terminal ? last.phase : null,
    currentPhase: last ? last.phase : null,
    axisStart,
    axisEnd
  };
}

/** Left offset and width of a phase's bar, in percent of the axis. */
export function barGeometry(
  timeline: ITimeline,
  phase: ITimelinePhase
): { left: number; width: number } {
  const span = Math.max(timeline.axisEnd - timeline.axisStart, 1);
  const left = Math.min(100, Math.max(0, ((phase.start - timeline.axisStart) / span) * 100));
  const width = Math.min(100 - left, Math.max(0, ((phase.durationSeconds * 1000) / span) * 100));
  return { left, width };
}

/** Total wall time from the first phase to the terminal one (or now). */
export function totalSeconds(timeline: ITimeline): number {
  return Math.max(0, timeline.axisEnd - timeline.axisStart) / 1000;
}
