import * as React from 'react';
import type { IPanelActions } from '../actions';
import { cellLabel } from '../cells';
import { jobNotebook } from '../state';
import type { IJob } from '../types';

export function GotoButton(props: {
  job: IJob;
  index: number;
  actions: IPanelActions;
}): JSX.Element {
  const { job, index, actions } = props;
  return (
    <button
      type="button"
      className="jp-Button jp-mod-styled jp-NBValidation-goto"
      data-cell-index={index}
      onClick={() => void actions.gotoCell(jobNotebook(job), index)}
      title={`Open ${jobNotebook(job)} and select ${cellLabel(index, false)}`}
    >
      Go to cell
    </button>
  );
}
