/**
 * What a person is told about a job (pure): its verdict kind and the words
 * for it. A cancel ends Failed / reason Cancelled, but is never shown as a
 * failure: it has its own word ("Cancelled"), symbol and colour.
 */
import { PHASE_LABELS, isTerminal } from './phases';
import type { IJob } from './types';

export type VerdictKind = 'succeeded' | 'failed' | 'cancelled' | 'running' | 'none';

export const CANCELLED_REASON = 'Cancelled';

/** Whether a (terminal) job ended by a cancel. */
export function isCancelled(job: IJob | null | undefined): boolean {
  const status = job?.status;
  if (!status || status.phase !== 'Failed') {
    return false;
  }
  if (status.reason) {
    return status.reason === CANCELLED_REASON;
  }
  const failed = (status.transitions ?? []).find(t => t.phase === 'Failed');
  return failed?.reason === CANCELLED_REASON;
}

export function verdictKind(job: IJob | null | undefined): VerdictKind {
  if (!job) {
    return 'none';
  }
  const phase = job.status?.phase ?? '';
  if (phase === 'Succeeded') {
    return 'succeeded';
  }
  if (phase === 'Failed') {
    return isCancelled(job) ? 'cancelled' : 'failed';
  }
  return 'running';
}

export const VERDICT_SYMBOL: Record<VerdictKind, string> = {
  succeeded: '✓',
  failed: '✗',
  cancelled: '⊘',
  running: '…',
  none: ''
};

/** The badge's word for a job's phase (Cancelled instead of Failed). */
export function phaseWord(job: IJob): string {
  const phase = job.status?.phase ?? '';
  if (isCancelled(job)) {
    return 'Cancelled';
  }
  return PHASE_LABELS[phase] ?? (phase || 'Pending');
}

/** The status bar's text for the newest job of the active notebook. */
export function statusBarText(job: IJob | null, progressText = ''): string {
  const kind = verdictKind(job);
  switch (kind) {
    case 'none':
      return 'Not validated';
    case 'succeeded':
      return 'Validated ✓';
    case 'failed':
      return 'Validation failed ✗';
    case 'cancelled':
      return 'Validation cancelled ⊘';
    default: {
      const phase = job?.status?.phase ?? '';
      const label = PHASE_LABELS[phase] ?? (phase || 'pending');
      return progressText ? `Validating: ${progressText}` : `Validating: ${label}…`;
    }
  }
}

/** The data-verdict attribute value of a job (styles and tests key on it). */
export function verdictAttr(job: IJob | null): string {
  const kind = verdictKind(job);
  return kind === 'none' ? 'none' : kind;
}

export { isTerminal };
