/**
 * The phase timeline of one job: the server's rule (jupyter_nbvalidation/
 * timeline.py, docs/architecture.md "The timeline rule"), so the panel and
 * `GET …/timeline` never disagree. Both are run on the same vectors
 * (tests/vectors/timeline/*.json, by pytest and by jest). Pure: the panel
 * calls it on every tick with `now` so the current phase grows live.
 *
 * The rule:
 * 1. From the events, every event whose reason is a transition reason
 *    (model.REASON_PHASE) with a readable time gives an entry; any other
 *    event (…StatusUpdateFailed warnings, unknown reasons) is no transition.
 * 2. One entry per phase: the earliest.
 * 3. When the events give fewer entries than status.transitions holds (some
 *    expired or were never recorded), the status history is used instead.
 * 4. Entries in time order; a phase ends when the next begins, a terminal
 *    phase at its own start; the last non-terminal phase is current and
 *    lasts until `now` (never negative).
 */
import { isTerminal, phaseOfReason } from './phases';
import { parseTime } from './format';
import type { IJob, IJobEvent, ITransition } from './types';

export type TimelineSource = 'events' | 'transitions';

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

/** Rule 2 and the order of rule 4: the earliest entry of each phase, in time order (stable). */
function firstPerPhase(entries: IPhaseEntry[]): IPhaseEntry[] {
  const sorted = entries
    .map((e, i) => ({ e, i }))
    .sort((a, b) => a.e.time - b.e.time || a.i - b.i)
    .map(x => x.e);
  const seen = new Set<string>();
  return sorted.filter(e => !seen.has(e.phase) && !!seen.add(e.phase));
}

/** Rule 1: the phase entries recorded by a job's Events. */
export function entriesFromEvents(events: readonly IJobEvent[] | undefined | null): IPhaseEntry[] {
  const entries: IPhaseEntry[] = [];
  for (const ev of events ?? []) {
    const phase = phaseOfReason(ev.reason);
    const time = parseTime(ev.eventTime);
    if (!phase || time === null) {
      continue;
    }
    entries.push({
      phase,
      time,
      reason: ev.reason ?? '',
      message: ev.note ?? '',
      type: ev.type ?? 'Normal'
    });
  }
  return firstPerPhase(entries);
}

/** The phase entries recorded in status.transitions. */
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
  return firstPerPhase(entries);
}

/** Rule 3: the events, unless they know fewer phases than status.transitions. */
export function chooseEntries(
  events: readonly IJobEvent[] | undefined | null,
  job: IJob | undefined | null
): { source: TimelineSource; entries: IPhaseEntry[] } {
  const fromEvents = entriesFromEvents(events);
  const fromStatus = entriesFromTransitions(job?.status?.transitions);
  if (fromEvents.length < fromStatus.length) {
    return { source: 'transitions', entries: fromStatus };
  }
  return { source: 'events', entries: fromEvents };
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
    const end = next ? next.time : terminal ? e.time : null;
    return {
      ...e,
      start: e.time,
      end,
      durationSeconds: Math.max(0, (end ?? now) - e.time) / 1000,
      current: end === null,
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

/**
 * The rows the panel shows: an instant "Build complete" (the validation started within a second)
 * is folded into the Building row, which then lasts until the validation starts — no
 * "Build complete 0.002s" row of noise. A Build complete that lasted (waiting for a slot) stays.
 */
export function shownPhases(timeline: ITimeline): ITimelinePhase[] {
  const out: ITimelinePhase[] = [];
  for (const p of timeline.phases) {
    const prev = out[out.length - 1];
    if (
      p.phase === 'BuildComplete' &&
      !p.current &&
      !p.failed &&
      p.durationSeconds < 1 &&
      prev?.phase === 'Building'
    ) {
      const end = p.end ?? prev.end;
      out[out.length - 1] = {
        ...prev,
        end,
        durationSeconds: prev.durationSeconds + p.durationSeconds,
        message: [prev.message, p.message].filter(Boolean).join('\n')
      };
      continue;
    }
    out.push(p);
  }
  return out;
}
