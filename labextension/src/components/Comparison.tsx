import * as React from 'react';
import type { IPanelActions } from '../actions';
import { stripAnsi } from '../format';
import type { IComparisonResult, IJob } from '../types';
import { GotoButton } from './GotoButton';

export function Comparison(props: {
  comparison: IComparisonResult | undefined;
  job: IJob;
  actions: IPanelActions;
}): JSX.Element | null {
  const { comparison, job, actions } = props;
  if (!comparison) {
    return null;
  }
  const diffs = comparison.diffs ?? [];
  const matched = comparison.result === 'matched';
  return (
    <div className="jp-NBValidation-section jp-NBValidation-comparison">
      <h3 className="jp-NBValidation-sectionTitle">Golden comparison</h3>
      <div
        className={`jp-NBValidation-comparisonResult${matched ? '' : ' jp-mod-failed'}`}
        data-result={comparison.result ?? ''}
      >
        {matched ? '✓ matched' : '✗ differs'}
        {comparison.totalCells !== undefined &&
          ` — ${comparison.matchedCells ?? 0}/${comparison.totalCells} cells matched`}
        {comparison.strategy && ` (${comparison.strategy})`}
      </div>
      {diffs.map((d, i) => (
        <div
          className="jp-NBValidation-diff"
          key={`${d.cellIndex}-${i}`}
          data-severity={d.severity ?? ''}
        >
          <div className="jp-NBValidation-diffHead">
            <span>
              cell {d.cellIndex}
              {d.diffType ? ` — ${d.diffType}` : ''}
              {d.severity ? ` (${d.severity})` : ''}
            </span>
            <GotoButton job={job} index={d.cellIndex} actions={actions} />
          </div>
          <div className="jp-NBValidation-diffColumns">
            <div>
              <div className="jp-NBValidation-diffLabel">Expected (golden)</div>
              <pre className="jp-NBValidation-expected">{stripAnsi(d.expected) || '∅'}</pre>
            </div>
            <div>
              <div className="jp-NBValidation-diffLabel">Actual</div>
              <pre className="jp-NBValidation-actual">{stripAnsi(d.actual) || '∅'}</pre>
            </div>
          </div>
          {d.diff && (
            <details>
              <summary>Unified diff</summary>
              <pre className="jp-NBValidation-unified">{stripAnsi(d.diff)}</pre>
            </details>
          )}
        </div>
      ))}
    </div>
  );
}
