/**
 * Phase order and helpers over the vocabulary generated from
 * jupyter_nbvalidation/core/model.py (src/vocabulary.ts).
 */
import { PHASES, Phase, REASON_PHASE, TERMINAL_PHASES } from './vocabulary';

export { PHASES, TERMINAL_PHASES };

export function isTerminal(phase: string | undefined | null): boolean {
  return !!phase && TERMINAL_PHASES.includes(phase);
}

export function phaseRank(phase: string): number {
  const i = PHASES.indexOf(phase as Phase);
  return i < 0 ? PHASES.length : i;
}

/**
 * The phase a transition reason enters (one Event per transition, reason =
 * the transition reason; docs/architecture.md, "Events"). Any other reason,
 * such as a …StatusUpdateFailed warning, maps to nothing: it never invents a
 * bar.
 */
export function phaseOfReason(reason: string | undefined): Phase | null {
  return reason && Object.prototype.hasOwnProperty.call(REASON_PHASE, reason)
    ? REASON_PHASE[reason]
    : null;
}

export const PHASE_LABELS: Record<string, string> = {
  Initializing: 'Initializing',
  Building: 'Building',
  BuildComplete: 'Build complete',
  ValidationRunning: 'Validation running',
  Succeeded: 'Succeeded',
  Failed: 'Failed'
};
