/** Save a notebook and submit its validation; the outcome is a notification or the panel. */
import { Notification } from '@jupyterlab/apputils';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { APIError } from '../errors';
import { describe } from '../model';
import { buildSpec, checkOptions, IOptionError, ISpecOptions, optionOfSpecField } from '../spec';
import { plainMessage } from '../words';
import { ICommandContext, serverPath } from './context';

export type ISubmitOptions = ISpecOptions;

/**
 * Submit; resolves to null when submitted (or when it failed in a way the
 * options cannot fix: a notification says it), or to the error of the field
 * that was refused — by the checks or by the server's 400 naming a spec field —
 * when `returnFieldErrors` is set (the Options dialog then shows it at its field).
 */
export async function submit(
  ctx: ICommandContext,
  nb: NotebookPanel,
  options: ISubmitOptions,
  { returnFieldErrors = false } = {}
): Promise<IOptionError[] | null> {
  const invalid = checkOptions(options);
  if (invalid.length) {
    if (returnFieldErrors) {
      return invalid;
    }
    Notification.error(`Validation not submitted: ${invalid.map(e => e.message).join('; ')}`, {
      autoClose: 10000
    });
    return null;
  }
  try {
    await nb.context.save();
  } catch (e) {
    Notification.error(`Could not save ${nb.context.path}: ${describe(e)}`, { autoClose: 8000 });
    return null;
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
    if (returnFieldErrors && e instanceof APIError && e.status >= 400 && e.status < 500) {
      // the server's refusal, at the field it names (or at the top of the dialog)
      return [
        {
          option: optionOfSpecField(e.field),
          field: e.field ? e.field.replace(/^spec\./, '') : 'spec',
          message: plainMessage(e.message, spec.notebook.path)
        }
      ];
    }
    Notification.error(
      `Validation could not be submitted: ${plainMessage(describe(e), spec.notebook.path)}`,
      { autoClose: 10000 }
    );
  }
  return null;
}
