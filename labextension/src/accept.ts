/**
 * "Accept actual as golden" for one cell: after a confirmation, the golden
 * notebook gets that cell's executed outputs, written through Jupyter's
 * contents API (an open copy of the golden notebook is reloaded).
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import type { IDocumentManager } from '@jupyterlab/docmanager';
import type { Contents } from '@jupyterlab/services';
import { cellLabel } from './cells';
import { acceptCells } from './golden';
import { describe, ValidationModel } from './model';
import type { IJob } from './types';

export async function acceptAsGolden(
  model: ValidationModel,
  contents: Contents.IManager,
  docManager: IDocumentManager,
  job: IJob,
  index: number | readonly number[]
): Promise<boolean> {
  const golden = job.spec.goldenNotebook?.path;
  const indexes = typeof index === 'number' ? [index] : [...index];
  if (!golden || !indexes.length) {
    return false;
  }
  const which =
    indexes.length === 1
      ? cellLabel(indexes[0], false)
      : `the ${indexes.length} differing cells (${indexes.map(i => cellLabel(i, false)).join(', ')})`;
  const answer = await showDialog({
    title: indexes.length === 1 ? `Accept ${which} as golden?` : 'Accept all as golden?',
    body:
      `The outputs of ${which} in ${golden} are replaced by the outputs ` +
      'this validation produced. Validate again to check the notebook now matches.',
    buttons: [
      Dialog.cancelButton(),
      Dialog.warnButton({ label: indexes.length === 1 ? 'Accept as golden' : 'Accept all' })
    ]
  });
  if (!answer.button.accept) {
    return false;
  }
  try {
    const executed = await model.executedNotebook(job.metadata.name);
    if (!executed) {
      throw new Error('the job has no executed notebook');
    }
    const current = await contents.get(golden, { type: 'notebook', content: true });
    const updated = acceptCells(
      current.content as Record<string, unknown>,
      executed as Record<string, unknown>,
      indexes
    );
    await contents.save(golden, { type: 'notebook', format: 'json', content: updated });
    const open = docManager.findWidget(golden);
    if (open && !open.context.model.dirty) {
      await open.context.revert();
    }
    for (const i of indexes) {
      model.markAccepted(job.metadata.name, i);
    }
    Notification.success(
      `${golden} now holds this validation's outputs of ${which}. Validate again to confirm.`,
      { autoClose: 6000 }
    );
    return true;
  } catch (e) {
    Notification.error(`Could not accept ${which} as golden: ${describe(e)}`, {
      autoClose: 10000
    });
    return false;
  }
}

/** A confirmation before a cancel; true when the user confirmed. */
export async function confirmCancel(job: IJob): Promise<boolean> {
  const answer = await showDialog({
    title: 'Cancel this validation?',
    body: `The validation of ${job.spec.notebook.path} stops now and ends as cancelled.`,
    buttons: [
      Dialog.cancelButton({ label: 'Keep running' }),
      Dialog.warnButton({ label: 'Cancel validation' })
    ]
  });
  return answer.button.accept;
}
