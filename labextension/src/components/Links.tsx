import * as React from 'react';
import type { ValidationModel } from '../model';
import { isTerminal } from '../phases';
import type { IJob } from '../types';

export function Links(props: { model: ValidationModel; job: IJob }): JSX.Element | null {
  const { model, job } = props;
  const name = job.metadata.name;
  const status = job.status ?? {};
  const hasBuild = !!status.buildStatus;
  const hasNotebook = isTerminal(status.phase) && (status.results?.length ?? 0) > 0;
  if (!hasBuild && !hasNotebook) {
    return null;
  }
  return (
    <div className="jp-NBValidation-links">
      {hasBuild && (
        <a
          className="jp-NBValidation-link"
          href={model.api.buildLogUrl(name)}
          target="_blank"
          rel="noopener noreferrer"
        >
          Build log
        </a>
      )}
      {hasNotebook && (
        <a
          className="jp-NBValidation-link"
          href={model.api.executedNotebookUrl(name)}
          target="_blank"
          rel="noopener noreferrer"
        >
          Executed notebook (JSON)
        </a>
      )}
    </div>
  );
}
