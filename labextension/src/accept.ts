/**
 * "Accept actual as golden" for one cell: after a confirmation, the golden
 * notebook gets that cell's executed outputs, written through Jupyter's
 * contents API (an open copy of the golden notebook is reloaded).
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import type { IDocumentManager } from '@jupyterlab/docmanager';
import type { Contents } from '@jupyterlab/services';
import { cellLabel } from './cells';
import { acceptCell } from './golden';
import { describe, ValidationModel } from './model';
import type { IJob } from './types';

export async function acceptAsGolden(
  model: ValidationModel,
  contents: Contents.IManager,
  docManager: IDocumentManager,
  job: IJob,
  index: number
): Promise<boolean> {
  const golden = job.spec.goldenNotebook?.path;
  if (!golden) {
    return false;
  }
  const answer = await showDialog({
    title: `Accept ${cellLabel(index, false)} as golden?`,
    body:
      `The outputs of ${cellLabel(index, false)} in ${golden} are replaced by the outputs ` +
      `this validation (${job.metadata.name}) produced. Validate again to check the notebook now matches.`,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Accept as golden' })]
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
    const updated = acceptCell(
      current.content as Record<string, unknown>,
      executed as Record<string, unknown>,
      index
    );
    await contents.save(golden, { type: 'notebook', format: 'json', content: updated });
    const open = docManager.findWidget(golden);
    if (open && !open.context.model.dirty) {
      await open.context.revert();
    }
    model.markAccepted(job.metadata.name, index);
    Notification.success(
      `${cellLabel(index)} of ${golden} now holds this validation's outputs. Validate again to confirm.`,
      { autoClose: 6000 }
    );
    return true;
  } catch (e) {
    Notification.error(`Could not accept ${cellLabel(index, false)} as golden: ${describe(e)}`, {
      autoClose: 10000
    });
    return false;
  }
}

/** A confirmation before a cancel; true when the user confirmed. */
export async function confirmCancel(job: IJob): Promise<boolean> {
  const answer = await showDialog({
    title: 'Cancel this validation?',
    body: `${job.metadata.name} (${job.spec.notebook.path}) stops now and ends as Cancelled.`,
    buttons: [
      Dialog.cancelButton({ label: 'Keep running' }),
      Dialog.warnButton({ label: 'Cancel validation' })
    ]
  });
  return answer.button.accept;
}
