/**
 * A schedule as the Schedules tab shows it (pure): its strip of verdicts (one mark per run of
 * `status.recent`, oldest → newest left to right, as the CLI's `✓✓✗✓` reads), each mark's title
 * and the run a click opens, and the row's words (next run, paused, running).
 */
import { parseTime } from './format';
import { isTerminal } from './phases';
import type { IJob, ISchedule, IScheduleRun } from './types';
import { VERDICT_SYMBOL, VerdictKind, phaseWord, verdictKind } from './verdict';
import { eventWords } from './words';

export interface IStripMark {
  /** the run a click opens (its job's name) */
  job: string;
  kind: VerdictKind;
  /** ✓ ✗ ⚠ ⊘ … */
  symbol: string;
  /** the verdict's word ("Succeeded", "Failed", "Cancelled", "Infrastructure error", …) */
  word: string;
  /** the hover text: job, verdict and reason, commit, finished time (one line each) */
  title: string;
  /** the same in one line, for a screen reader */
  label: string;
}

/** A run of the strip as a job document, so that the Jobs list's verdict rules apply. */
function runAsJob(run: IScheduleRun): IJob {
  return {
    metadata: { name: run.job },
    spec: { notebook: { path: '' } },
    status: { phase: run.phase || 'Pending', reason: run.reason ?? undefined }
  };
}

/** "2026-12-08 03:00:41 UTC" (the server's times are UTC, and so is the cron expression). */
export function utcWords(value: string | null | undefined): string {
  const t = parseTime(value ?? null);
  if (t === null) {
    return '';
  }
  return new Date(t)
    .toISOString()
    .replace('T', ' ')
    .replace(/\.\d+Z$/, ' UTC');
}

/** The first seven characters of a commit SHA ('' without one). */
export function shortSha(commit: string | null | undefined): string {
  return commit ? commit.replace(/[^0-9a-f]/gi, '').slice(0, 7) : '';
}

/** One mark of the strip. */
export function stripMark(run: IScheduleRun): IStripMark {
  const job = runAsJob(run);
  const kind = verdictKind(job);
  const word = phaseWord(job);
  const reason = run.reason ? eventWords(run.reason) : '';
  const verdict = reason && reason !== word ? `${word}: ${reason.toLowerCase()}` : word;
  const finished = utcWords(run.finished);
  const lines = [
    run.job,
    verdict,
    ...(shortSha(run.commit) ? [`commit ${shortSha(run.commit)}`] : []),
    ...(finished ? [`finished ${finished}`] : isTerminal(run.phase) ? [] : ['still running'])
  ];
  return {
    job: run.job,
    kind,
    symbol: VERDICT_SYMBOL[kind] || '…',
    word,
    title: lines.join('\n'),
    label: lines.join(', ')
  };
}

/** The strip of a schedule: its recent runs, oldest first (status.recent is newest first). */
export function stripMarks(schedule: ISchedule): IStripMark[] {
  return [...(schedule.status?.recent ?? [])].reverse().map(stripMark);
}

/** The strip as the CLI prints it (`✓✓✗✓`). */
export function stripText(schedule: ISchedule): string {
  return stripMarks(schedule)
    .map(m => m.symbol)
    .join('');
}

/** "next 2026-12-09 03:00:00 UTC", "paused", or '' when the server did not say. */
export function nextRunWords(schedule: ISchedule): string {
  if (schedule.spec.suspend) {
    return 'paused';
  }
  const next = utcWords(schedule.status?.nextScheduleTime);
  return next ? `next ${next}` : '';
}

/** The schedule's state in a word: Paused, Running (a run goes now) or Active. */
export function scheduleState(schedule: ISchedule): 'Paused' | 'Running' | 'Active' {
  if (schedule.spec.suspend) {
    return 'Paused';
  }
  return schedule.status?.active ? 'Running' : 'Active';
}

/** Whether the tab should look again soon: a run goes, or the next tick is near. */
export function busySoon(schedules: readonly ISchedule[], now: number, withinMs: number): boolean {
  return schedules.some(s => {
    if (s.status?.active || (s.status?.recent ?? []).some(r => !isTerminal(r.phase))) {
      return true;
    }
    const next = parseTime(s.status?.nextScheduleTime ?? null);
    return !s.spec.suspend && next !== null && next - now < withinMs;
  });
}

/** status.message (a skipped tick, a run that could not be submitted), its times in words. */
export function scheduleMessage(schedule: ISchedule): string {
  return (schedule.status?.message ?? '').replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, t =>
    utcWords(t)
  );
}
