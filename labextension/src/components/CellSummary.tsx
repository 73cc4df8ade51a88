import * as React from 'react';
import type { ICellResult } from '../types';

/**
 * Passed / failed / skipped over code cells only: a markdown or raw cell is
 * never "skipped" (its type from the result, else from the executed notebook).
 */
export function CellSummary(props: {
  results: ICellResult[] | undefined;
  cellTypes?: string[] | null;
}): JSX.Element | null {
  const { cellTypes } = props;
  const results = (props.results ?? []).filter(r => {
    const type = r.cellType ?? cellTypes?.[r.cellIndex];
    return type === undefined || type === 'code';
  });
  if (!results.length) {
    return null;
  }
  const count = (s: string) => results.filter(r => r.status === s).length;
  const known = results.every(r => r.cellType ?? cellTypes?.[r.cellIndex]);
  return (
    <div className="jp-NBValidation-cells" data-code-only={known}>
      {known ? 'Code cells' : 'Cells'}: {count('Success')} passed, {count('Failure')} failed,{' '}
      {count('Skipped')} skipped
    </div>
  );
}
