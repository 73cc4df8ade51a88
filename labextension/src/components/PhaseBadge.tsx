import * as React from 'react';
import type { IJob } from '../types';
import { VERDICT_SYMBOL, phaseWord, verdictAttr, verdictKind } from '../verdict';

/** The job's verdict as a symbol (✓ ✗ ⊘ ⚠, … while it runs); its word is the label. */
export function PhaseBadge(props: { job: IJob }): JSX.Element {
  const { job } = props;
  const phase = job.status?.phase || 'Pending';
  const word = phaseWord(job);
  return (
    <span
      className="jp-NBValidation-badge"
      data-phase={phase}
      data-verdict={verdictAttr(job)}
      title={word}
      aria-label={word}
    >
      {VERDICT_SYMBOL[verdictKind(job)] || '…'}
    </span>
  );
}
