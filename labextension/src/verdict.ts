/**
 * What a person is told about a job (pure): its verdict kind and the words
 * for it. A cancel ends Failed / reason Cancelled, but is never shown as a
 * failure: it has its own word ("Cancelled"), symbol and colour. Likewise a
 * fault that is not the notebook's (Failed / reason InfrastructureFailed):
 * "Infrastructure error", its own symbol and colour, never "failed".
 */
import { formatAgo } from './format';
import { PHASE_LABELS, isTerminal } from './phases';
import type { IChanges, IJob } from './types';
import { Reason } from './vocabulary';
import { plainChanges, plainMessage } from './words';

export type VerdictKind =
  'succeeded' | 'failed' | 'infrastructure' | 'cancelled' | 'running' | 'none';

export const CANCELLED_REASON = 'Cancelled';
export const INFRASTRUCTURE_REASON: string = Reason.INFRASTRUCTURE_FAILED;

/** Whether a (terminal) job ended because of a fault that is not the notebook's. */
export function isInfrastructureError(job: IJob | null | undefined): boolean {
  const status = job?.status;
  return !!status && status.phase === 'Failed' && status.reason === INFRASTRUCTURE_REASON;
}

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
    if (isInfrastructureError(job)) {
      return 'infrastructure';
    }
    return isCancelled(job) ? 'cancelled' : 'failed';
  }
  return 'running';
}

export const VERDICT_SYMBOL: Record<VerdictKind, string> = {
  succeeded: '✓',
  failed: '✗',
  infrastructure: '⚠',
  cancelled: '⊘',
  running: '…',
  none: ''
};

/** The badge's word for a job's phase (Cancelled, Infrastructure error instead of Failed). */
export function phaseWord(job: IJob): string {
  const phase = job.status?.phase ?? '';
  if (isCancelled(job)) {
    return 'Cancelled';
  }
  if (isInfrastructureError(job)) {
    return 'Infrastructure error';
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
    case 'infrastructure':
      return 'Validation error (infrastructure, not the notebook) ⚠';
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

/**
 * What the job's environment is built from, as the job detail shows it
 * ("Environment: 2 requirements from requirements.txt beside the notebook"),
 * or null before the server planned it (status.environment).
 */
export function environmentText(job: IJob | null | undefined): string | null {
  const env = job?.status?.environment;
  return env ? `Environment: ${plainMessage(env)}` : null;
}

/**
 * "Since the last success 2d ago: pandas 2.2.3 → 3.0.0; no cell changed" for a
 * failed job whose notebook passed before (GET …/changes), else null.
 */
export function sinceLastSuccessText(
  job: IJob | null | undefined,
  changes: IChanges | null | undefined,
  now: number
): string | null {
  if (!job || job.status?.phase !== 'Failed' || !changes?.since) {
    return null;
  }
  const when = changes.since.completionTime ? Date.parse(changes.since.completionTime) : NaN;
  const ago = Number.isNaN(when) ? '' : ` ${formatAgo(when, now)}`;
  return `Since the last success${ago}: ${plainChanges(changes.sentence)}`;
}

export { isTerminal };
