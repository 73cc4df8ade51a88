import * as React from 'react';
import type { IPanelActions } from '../actions';
import { cellLabel } from '../cells';
import { stripAnsi } from '../format';
import { jobPhase } from '../state';
import { splitTraceback } from '../traceback';
import type { ICellResult, IJob } from '../types';
import { isCancelled } from '../verdict';
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
  if (
    result.status !== 'Failure' &&
    !result.errorName &&
    job.status?.comparisonResult &&
    job.status.comparisonResult.result !== 'matched'
  ) {
    // a golden mismatch marks its first differing cell: the diff below shows it, not a failure
    return null;
  }
  const split = splitTraceback(result);
  const libraryCount = split.libraryFrames.length;
  const hasFrames = split.cellFrames.length + libraryCount > 0;
  const cancelled = isCancelled(job);
  return (
    <div
      className={`jp-NBValidation-section jp-NBValidation-failure${cancelled ? ' jp-mod-cancelled' : ''}`}
    >
      <h3 className="jp-NBValidation-sectionTitle">
        {cancelled ? 'Cell running when cancelled' : 'Failing cell'}
      </h3>
      <div className="jp-NBValidation-failureHead">
        <span className="jp-NBValidation-cellIndex" data-cell-index={result.cellIndex}>
          {cellLabel(result.cellIndex)}
        </span>
        <GotoButton job={job} index={result.cellIndex} actions={actions} />
      </div>
      {(result.errorName || result.errorMessage) && (
        <div className="jp-NBValidation-errorLine">
          {result.errorName && <strong>{result.errorName}</strong>}
          {result.errorName && result.errorMessage ? ': ' : ''}
          {stripAnsi(result.errorMessage)}
        </div>
      )}
      {hasFrames ? (
        <div className="jp-NBValidation-traceback" aria-label="Traceback">
          {split.cellFrames.map((f, i) => (
            <pre key={`c${i}`} className="jp-NBValidation-frame jp-mod-cell">
              {f.text}
            </pre>
          ))}
          {split.tail && <pre className="jp-NBValidation-frame jp-mod-error">{split.tail}</pre>}
          {libraryCount > 0 && (
            <details className="jp-NBValidation-libraryFrames">
              <summary>
                {libraryCount} library frame{libraryCount === 1 ? '' : 's'}
              </summary>
              {split.libraryFrames.map((f, i) => (
                <pre key={`l${i}`} className="jp-NBValidation-frame jp-mod-library">
                  {f.text}
                </pre>
              ))}
            </details>
          )}
        </div>
      ) : (
        split.tail && (
          <div className="jp-NBValidation-traceback" aria-label="Traceback">
            <pre className="jp-NBValidation-frame jp-mod-error">{split.tail}</pre>
          </div>
        )
      )}
    </div>
  );
}
