/**
 * "Validate Notebook with Options…": a dialog for the golden notebook, build,
 * timeouts, tolerances, ignored outputs, parameters and lax mode. A field the
 * checks or the server refuse reopens the dialog with the values kept and the
 * reason at that field.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ellipsesIcon } from '@jupyterlab/ui-components';
import { emptyOptions, IValidateOptions, ValidateOptionsBody } from '../dialog';
import { checkOptions, IOptionError } from '../spec';
import { rememberedOptions, rememberOptions } from '../remembered';
import { ICommandContext, currentNotebook, serverPath } from './context';
import { CommandIDs } from './ids';
import { submit } from './submit';

export function addValidateWithOptionsCommand(ctx: ICommandContext): void {
  const { settings } = ctx;
  ctx.app.commands.addCommand(CommandIDs.validateWithOptions, {
    label: args => (args.toolbar ? '' : 'Validate Notebook with Options…'),
    caption:
      'Validate with options: golden notebook, build on/off, timeouts, tolerances, ignored outputs, parameters, lax mode',
    icon: args => (args.toolbar ? ellipsesIcon : undefined),
    isEnabled: () => !!currentNotebook(ctx),
    execute: async args => {
      const nb = currentNotebook(ctx, args as Record<string, unknown>);
      if (!nb) {
        return;
      }
      const path = serverPath(ctx, nb);
      // the options this notebook was last validated with (golden notebook included), else the defaults
      let values: IValidateOptions =
        rememberedOptions(path) ?? emptyOptions(settings.buildEnabled, settings.defaultTimeout);
      let errors: IOptionError[] = [];
      for (;;) {
        const result = await showDialog({
          title: `Validate ${nb.context.path}`,
          body: new ValidateOptionsBody(values, errors),
          buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Validate' })],
          focusNodeSelector: errors.some(e => e.option) ? '[aria-invalid="true"]' : 'input'
        });
        if (!result.button.accept || !result.value) {
          return;
        }
        values = result.value;
        errors = checkOptions(values);
        if (errors.length) {
          continue;
        }
        const refused = await submit(ctx, nb, values, { returnFieldErrors: true });
        if (!refused) {
          rememberOptions(path, values); // "Validate" repeats them for this notebook
          return;
        }
        errors = refused;
      }
    }
  });
}
