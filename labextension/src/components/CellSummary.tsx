import * as React from 'react';
import type { ICellResult } from '../types';

export function CellSummary(props: { results: ICellResult[] | undefined }): JSX.Element | null {
  const results = props.results ?? [];
  if (!results.length) {
    return null;
  }
  const count = (s: string) => results.filter(r => r.status === s).length;
  return (
    <div className="jp-NBValidation-cells">
      Cells: {count('Success')} passed, {count('Failure')} failed, {count('Skipped')} skipped
    </div>
  );
}
