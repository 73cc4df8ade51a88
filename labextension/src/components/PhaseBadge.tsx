import * as React from 'react';
import type { IJob } from '../types';
import { phaseWord, verdictAttr } from '../verdict';

export function PhaseBadge(props: { job: IJob }): JSX.Element {
  const { job } = props;
  const phase = job.status?.phase || 'Pending';
  return (
    <span className="jp-NBValidation-badge" data-phase={phase} data-verdict={verdictAttr(job)}>
      {phaseWord(job)}
    </span>
  );
}
