/** Save a notebook and submit its validation; the outcome is a notification or the panel. */
import { Notification } from '@jupyterlab/apputils';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { describe } from '../model';
import { buildSpec } from '../spec';
import { ICommandContext, serverPath } from './context';

export interface ISubmitOptions {
  goldenPath?: string;
  buildEnabled?: boolean;
  timeout?: string;
}

export async function submit(
  ctx: ICommandContext,
  nb: NotebookPanel,
  options: ISubmitOptions
): Promise<void> {
  try {
    await nb.context.save();
  } catch (e) {
    Notification.error(`Could not save ${nb.context.path}: ${describe(e)}`, { autoClose: 8000 });
    return;
  }
  const spec = buildSpec(serverPath(ctx, nb), options);
  try {
    const job = await ctx.model.submit(spec);
    if (ctx.settings.openPanelOnValidate) {
      ctx.openPanel();
    } else {
      Notification.info(`Validation of ${spec.notebook.path} submitted (${job.metadata.name}).`, {
        autoClose: 4000,
        actions: [{ label: 'Show', callback: ctx.openPanel }]
      });
    }
  } catch (e) {
    Notification.error(`Validation could not be submitted: ${describe(e)}`, { autoClose: 10000 });
  }
}
