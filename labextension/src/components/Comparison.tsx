import * as React from 'react';
import type { IPanelActions } from '../actions';
import { cellLabel } from '../cells';
import { diffHeading } from '../words';
import { stripAnsi } from '../format';
import { canAccept } from '../golden';
import type { IComparisonResult, IJob } from '../types';
import { GotoButton } from './GotoButton';

/** "absolute 0.0001, relative 0" (the tolerances the comparison used). */
export function toleranceText(comparison: IComparisonResult): string {
  const t = comparison.tolerance;
  if (!t) {
    return '';
  }
  const parts: string[] = [];
  if (t.absolute !== undefined && t.absolute !== null) {
    parts.push(`absolute ${t.absolute}`);
  }
  if (t.relative !== undefined && t.relative !== null) {
    parts.push(`relative ${t.relative}`);
  }
  return parts.join(', ');
}

export function Comparison(props: {
  comparison: IComparisonResult | undefined;
  job: IJob;
  actions: IPanelActions;
  /** cells accepted into the golden notebook since this job ran */
  accepted?: ReadonlySet<number>;
}): JSX.Element | null {
  const { comparison, job, actions, accepted } = props;
  if (!comparison) {
    return null;
  }
  const diffs = comparison.diffs ?? [];
  const matched = comparison.result === 'matched';
  const tolerance = toleranceText(comparison);
  const golden = job.spec.goldenNotebook?.path;
  const acceptable = golden
    ? diffs.filter(d => canAccept(d) && !accepted?.has(d.cellIndex)).map(d => d.cellIndex)
    : [];
  return (
    <div className="jp-NBValidation-section jp-NBValidation-comparison">
      <h3 className="jp-NBValidation-sectionTitle">Golden comparison</h3>
      <div
        className={`jp-NBValidation-comparisonResult${matched ? '' : ' jp-mod-failed'}`}
        data-result={comparison.result ?? ''}
      >
        {matched ? '✓ matched' : '✗ differs'}
        {comparison.totalCells !== undefined &&
          ` — ${comparison.matchedCells ?? 0} of ${comparison.totalCells} cells match`}
      </div>
      {acceptable.length > 1 && (
        <div className="jp-NBValidation-acceptAllRow">
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-NBValidation-acceptAll"
            onClick={() => void actions.acceptAllGolden(job, acceptable)}
            title={`Write the actual outputs of all ${acceptable.length} differing cells into ${golden}`}
          >
            Accept all as golden
          </button>
        </div>
      )}
      {tolerance && (
        <div
          className="jp-NBValidation-tolerance"
          title="Numbers in outputs match when |expected − actual| ≤ absolute + relative × |expected|"
        >
          Tolerance: {tolerance}
          {comparison.lax && ' · lax mode (only cells marked to be checked)'}
        </div>
      )}
      {diffs.map((d, i) => (
        <div
          className="jp-NBValidation-diff"
          key={`${d.cellIndex}-${i}`}
          data-severity={d.severity ?? ''}
          data-cell-index={d.cellIndex}
        >
          <div className="jp-NBValidation-diffHead">
            <span className="jp-NBValidation-diffTitle">{diffHeading(d)}</span>
            <span className="jp-NBValidation-diffActions">
              {job.spec.goldenNotebook?.path &&
                canAccept(d) &&
                (accepted?.has(d.cellIndex) ? (
                  <span className="jp-NBValidation-accepted">accepted ✓</span>
                ) : (
                  <button
                    type="button"
                    className="jp-Button jp-mod-styled jp-NBValidation-accept"
                    onClick={() => void actions.acceptGolden(job, d.cellIndex)}
                    title={`Write ${cellLabel(d.cellIndex, false)}'s actual outputs into ${job.spec.goldenNotebook.path}`}
                  >
                    Accept as golden
                  </button>
                ))}
              <GotoButton job={job} index={d.cellIndex} actions={actions} />
            </span>
          </div>
          {d.diff && (
            <details className="jp-NBValidation-unifiedSection" open>
              <summary>Unified diff</summary>
              <pre className="jp-NBValidation-unified">{stripAnsi(d.diff)}</pre>
            </details>
          )}
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
        </div>
      ))}
    </div>
  );
}
