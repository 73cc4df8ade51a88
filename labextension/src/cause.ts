/**
 * Find the cause (issue 22), DOM-free: whether a job can be bisected, and what the
 * panel shows of the server's search (GET /jobs/{name}/bisect).
 */
import type { IBisection, IChanges, IJob } from './types';
import { somethingToSearch } from './words';

/** A failed job (not cancelled, not an infrastructure fault) whose notebook passed before. */
export function canFindCause(
  job: IJob | null | undefined,
  changes: IChanges | null | undefined
): boolean {
  const status = job?.status;
  if (!status || status.phase !== 'Failed' || !changes?.since) {
    return false;
  }
  if (status.reason === 'Cancelled' || status.reason === 'InfrastructureFailed') {
    return false;
  }
  // only where there is something to search: packages (or Python, requirements) that changed,
  // not when only the golden file or the cells changed
  return somethingToSearch(changes);
}

export interface ICauseView {
  running: boolean;
  /** one line per step that ended ("step 2/12: nbvdrifta 1.0 → 2.0 → Failed (job …)") */
  steps: string[];
  /** the conclusion once it ended ("nbvdrifta 1.0 → 2.0 turns it red (3 validations, 41 s)") */
  conclusion: string | null;
  /** found: a culprit set; else the search ended without one, or could not run */
  found: boolean;
}

export function causeView(doc: IBisection | null | undefined): ICauseView | null {
  if (!doc) {
    return null;
  }
  const steps = doc.steps.map(
    (s, i) => s.text ?? `step ${i + 1}/${doc.maxSteps}: ${s.outcome} (job ${s.job})`
  );
  const result = doc.result;
  let conclusion: string | null = null;
  if (doc.state === 'stopped') {
    conclusion = result?.message ? `Stopped: ${result.message}` : 'Stopped';
  } else if (result) {
    conclusion = result.message;
  }
  return {
    running: doc.state === 'running',
    steps,
    conclusion,
    found: result?.result === 'found'
  };
}
