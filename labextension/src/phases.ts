/** Phase order and helpers (mirror of jupyter_nbvalidation.model.Phase). */
import type { Phase } from './types';

export const PHASES: readonly Phase[] = [
  'Initializing',
  'Building',
  'BuildComplete',
  'ValidationRunning',
  'Succeeded',
  'Failed'
];

export const TERMINAL_PHASES: readonly string[] = ['Succeeded', 'Failed'];

export function isTerminal(phase: string | undefined | null): boolean {
  return !!phase && TERMINAL_PHASES.includes(phase);
}

export function phaseRank(phase: string): number {
  const i = PHASES.indexOf(phase as Phase);
  return i < 0 ? PHASES.length : i;
}

/**
 * The phase a transition reason enters (design §3: one Event per
 * transition, reason = the transition reason). Unknown reasons map to
 * nothing so they never invent a bar.
 */
const REASON_PHASE: Record<string, Phase> = {
  Accepted: 'Initializing',
  Submitted: 'Initializing',
  Initializing: 'Initializing',
  BuildStarted: 'Building',
  BuildSucceeded: 'BuildComplete',
  BuildComplete: 'BuildComplete',
  ValidationStarted: 'ValidationRunning',
  ValidationSucceeded: 'Succeeded',
  Succeeded: 'Succeeded',
  ValidationFailed: 'Failed',
  ValidationTimedOut: 'Failed',
  BuildFailed: 'Failed',
  BuildTimedOut: 'Failed',
  Cancelled: 'Failed',
  InvalidInput: 'Failed',
  Failed: 'Failed'
};

/** The phase an event records entering, or null when it is no transition. */
export function phaseOfReason(reason: string | undefined): Phase | null {
  if (!reason || reason.endsWith('StatusUpdateFailed')) {
    return null;
  }
  return REASON_PHASE[reason] ?? null;
}

export const PHASE_LABELS: Record<string, string> = {
  Initializing: 'Initializing',
  Building: 'Building',
  BuildComplete: 'Build complete',
  ValidationRunning: 'Validation running',
  Succeeded: 'Succeeded',
  Failed: 'Failed'
};
