/**
 * Validation progress (status.progress, written by the engine during
 * ValidationRunning): which cell runs, cells done/total, elapsed per cell.
 * Pure: the panel and the status bar call it on every tick with `now`.
 */
import { cellLabel } from './cells';
import { formatDuration, parseTime } from './format';
import type { IJob, IProgress } from './types';

export interface IProgressView {
  done: number;
  total: number;
  /** 0-based notebook index of the running cell, or null */
  currentIndex: number | null;
  /** seconds the running cell has run so far (null: unknown) */
  currentElapsed: number | null;
  /** finished cells, in the order they ran */
  cells: Array<{ cellIndex: number; status: string; executionTime: number | null }>;
  /** percentage of cells done, 0..100 */
  percent: number;
}

export function readProgress(job: IJob | null | undefined, now: number): IProgressView | null {
  const p: IProgress | undefined | null = job?.status?.progress;
  if (!p || typeof p !== 'object') {
    return null;
  }
  const total = Math.max(0, Number(p.cellsTotal) || 0);
  const done = Math.max(0, Math.min(total || Infinity, Number(p.cellsDone) || 0));
  const currentIndex =
    typeof p.currentCellIndex === 'number' && p.currentCellIndex >= 0 ? p.currentCellIndex : null;
  const started = parseTime(p.currentCellStartedAt ?? null);
  const currentElapsed =
    currentIndex !== null && started !== null ? Math.max(0, (now - started) / 1000) : null;
  const cells = (Array.isArray(p.cells) ? p.cells : []).map(c => ({
    cellIndex: Number(c.cellIndex),
    status: String(c.status ?? ''),
    executionTime:
      typeof c.executionTime === 'number' && Number.isFinite(c.executionTime)
        ? c.executionTime
        : null
  }));
  const percent = total ? Math.min(100, (done / total) * 100) : 0;
  return { done, total, currentIndex, currentElapsed, cells, percent };
}

/** "Cell 4 running (2/5 done, 3.2s)"; "5/5 cells done"; "" without progress. */
export function progressText(view: IProgressView | null): string {
  if (!view) {
    return '';
  }
  const counts = `${view.done}/${view.total} done`;
  if (view.currentIndex !== null) {
    const elapsed = view.currentElapsed !== null ? `, ${formatDuration(view.currentElapsed)}` : '';
    return `${cellLabel(view.currentIndex)} running (${counts}${elapsed})`;
  }
  return `${view.done}/${view.total} cells done`;
}

/** When the job entered `phase` (its last transition into it), ms since the epoch, or null. */
export function phaseEnteredAt(job: IJob | null | undefined, phase: string): number | null {
  const ts = (job?.status?.transitions ?? []).filter(t => t.phase === phase);
  return ts.length ? parseTime(ts[ts.length - 1].time) : null;
}

/**
 * What the job does right now, for the panel and the status bar alike (one clock: both pass the
 * model's `now`): "Starting the kernel in the new environment… 12 s" until the first cell runs,
 * then the cell progress. "" when there is nothing live to say.
 */
export function liveText(job: IJob | null | undefined, now: number): string {
  const phase = job?.status?.phase ?? '';
  if (phase === 'BuildComplete') {
    return 'Environment ready; starting the validation…';
  }
  if (phase !== 'ValidationRunning') {
    return '';
  }
  const view = readProgress(job, now);
  if (view && (view.currentIndex !== null || view.done > 0)) {
    return progressText(view);
  }
  const since = phaseEnteredAt(job, 'ValidationRunning');
  const secs = since === null ? null : Math.max(0, Math.floor((now - since) / 1000));
  return `Starting the kernel in the new environment…${secs === null ? '' : ` ${secs} s`}`;
}
