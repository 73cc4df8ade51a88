import * as React from 'react';
import { cellLabel } from '../cells';
import { formatDuration } from '../format';
import { liveText, readProgress } from '../progress';
import type { IJob } from '../types';

/** Cell progress during ValidationRunning: the running cell, done/total, time per cell. */
export function Progress(props: { job: IJob; now: number }): JSX.Element | null {
  const { job, now } = props;
  const text = liveText(job, now);
  if (!text) {
    return null;
  }
  const view = readProgress(job, now);
  if (!view) {
    return (
      <div className="jp-NBValidation-section jp-NBValidation-progress" data-done={0}>
        <div className="jp-NBValidation-progressText" role="status">
          {text}
        </div>
      </div>
    );
  }
  return (
    <div
      className="jp-NBValidation-section jp-NBValidation-progress"
      data-done={view.done}
      data-total={view.total}
      data-current={view.currentIndex ?? ''}
    >
      <h3 className="jp-NBValidation-sectionTitle">Cells</h3>
      <div className="jp-NBValidation-progressText" role="status">
        {text}
      </div>
      <div
        className="jp-NBValidation-progressTrack"
        role="progressbar"
        aria-valuemin={0}
        aria-valuemax={view.total}
        aria-valuenow={view.done}
      >
        <span className="jp-NBValidation-progressBar" style={{ width: `${view.percent}%` }} />
      </div>
      {view.cells.length > 0 && (
        <ol className="jp-NBValidation-progressCells" aria-label="Finished cells">
          {view.cells.map(c => (
            <li key={c.cellIndex} data-status={c.status} data-cell-index={c.cellIndex}>
              <span>{cellLabel(c.cellIndex)}</span>
              <span>
                {c.status === 'Success'
                  ? 'passed'
                  : c.status === 'Failure'
                    ? 'failed'
                    : c.status.toLowerCase()}
              </span>
              <span>{c.executionTime !== null ? formatDuration(c.executionTime) : ''}</span>
            </li>
          ))}
        </ol>
      )}
    </div>
  );
}
