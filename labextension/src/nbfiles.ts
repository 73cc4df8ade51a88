/** Names and content of a job's executed notebook as the lab shows it (pure). */
import { basename } from './format';
import type { IJob } from './types';

/** "<job>/<basename>" inside the drive. */
export function executedPath(job: IJob): string {
  const nb = basename(job.spec?.notebook?.path ?? 'notebook.ipynb') || 'notebook.ipynb';
  return `${job.metadata.name}/${nb}`;
}

/** The notebook with every cell marked not editable and not deletable (JupyterLab honours both). */
export function lockCells(nb: Record<string, unknown>): Record<string, unknown> {
  const cells = (nb.cells as Array<Record<string, unknown>> | undefined) ?? [];
  return {
    ...nb,
    cells: cells.map(c => ({
      ...c,
      metadata: {
        ...((c.metadata as Record<string, unknown> | undefined) ?? {}),
        editable: false,
        deletable: false
      }
    }))
  };
}

/** "analysis.ipynb" of job nbv-1 → "analysis.nbv-1.executed.ipynb". */
export function lockFileName(job: IJob): string {
  const nb = basename(job.spec?.notebook?.path ?? 'notebook.ipynb');
  const stem = nb.replace(/\.ipynb$/i, '') || 'notebook';
  return `${stem}.${job.metadata.name}.lock.txt`;
}

export function executedFileName(job: IJob): string {
  const nb = basename(job.spec?.notebook?.path ?? 'notebook.ipynb');
  const stem = nb.replace(/\.ipynb$/i, '') || 'notebook';
  return `${stem}.${job.metadata.name}.executed.ipynb`;
}
