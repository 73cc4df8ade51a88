import * as React from 'react';
import type { IPanelActions } from '../actions';
import { stripAnsi } from '../format';
import { jobPhase } from '../state';
import type { ICellResult, IJob } from '../types';
import { GotoButton } from './GotoButton';

export function failingResult(job: IJob): ICellResult | null {
  const results = job.status?.results ?? [];
  const idx = job.status?.failedCellIndex;
  if (idx !== undefined && idx !== null) {
    return (
      results.find(r => r.cellIndex === idx) ?? {
        cellIndex: idx,
        status: 'Failure'
      }
    );
  }
  return results.find(r => r.status === 'Failure') ?? null;
}

export function FailureDetails(props: { job: IJob; actions: IPanelActions }): JSX.Element | null {
  const { job, actions } = props;
  if (jobPhase(job) !== 'Failed') {
    return null;
  }
  const result = failingResult(job);
  if (!result) {
    return null;
  }
  const traceback = stripAnsi(result.output);
  return (
    <div className="jp-NBValidation-section jp-NBValidation-failure">
      <h3 className="jp-NBValidation-sectionTitle">Failing cell</h3>
      <div className="jp-NBValidation-failureHead">
        <span className="jp-NBValidation-cellIndex">cell {result.cellIndex}</span>
        <GotoButton job={job} index={result.cellIndex} actions={actions} />
      </div>
      {(result.errorName || result.errorMessage) && (
        <div className="jp-NBValidation-errorLine">
          {result.errorName && <strong>{result.errorName}</strong>}
          {result.errorName && result.errorMessage ? ': ' : ''}
          {stripAnsi(result.errorMessage)}
        </div>
      )}
      {traceback && <pre className="jp-NBValidation-traceback">{traceback}</pre>}
    </div>
  );
}
