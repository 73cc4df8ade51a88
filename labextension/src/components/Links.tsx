import * as React from 'react';
import type { IPanelActions } from '../actions';
import { isTerminal } from '../phases';
import type { IJob } from '../types';

/** The executed notebook: open it in a lab tab (read-only, no kernel) or download it. */
export function Links(props: { job: IJob; actions: IPanelActions }): JSX.Element | null {
  const { job, actions } = props;
  const status = job.status ?? {};
  const hasNotebook = isTerminal(status.phase) && (status.results?.length ?? 0) > 0;
  if (!hasNotebook) {
    return null;
  }
  return (
    <div className="jp-NBValidation-links">
      <button
        type="button"
        className="jp-Button jp-mod-styled jp-NBValidation-openExecuted"
        onClick={() => void actions.openExecuted(job)}
        title="Open the executed notebook, with its outputs, in a read-only tab (no kernel)"
      >
        Open executed notebook
      </button>
      <button
        type="button"
        className="jp-Button jp-mod-styled jp-NBValidation-downloadExecuted"
        onClick={() => void actions.downloadExecuted(job)}
        title="Download the executed notebook as .ipynb"
      >
        Download .ipynb
      </button>
      {status.phase === 'Succeeded' &&
        status.environment &&
        job.spec.podConfig?.buildConfig?.enabled !== false && (
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-NBValidation-downloadLock"
            onClick={() => void actions.downloadLock(job)}
            title="Download the exact versions of every package this validation ran with, as a requirements file (uv pip install -r / pip install -r)"
          >
            Download the lock
          </button>
        )}
    </div>
  );
}
