/** "Validate Notebook with Options…": a dialog for the golden notebook, build and timeout. */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ellipsesIcon } from '@jupyterlab/ui-components';
import { ValidateOptionsBody } from '../dialog';
import { isValidTimeout } from '../spec';
import { ICommandContext, currentNotebook } from './context';
import { CommandIDs } from './ids';
import { submit } from './submit';

export function addValidateWithOptionsCommand(ctx: ICommandContext): void {
  const { settings } = ctx;
  ctx.app.commands.addCommand(CommandIDs.validateWithOptions, {
    label: args => (args.toolbar ? '' : 'Validate Notebook with Options…'),
    caption: 'Validate with options: golden notebook, build on/off, timeout',
    icon: args => (args.toolbar ? ellipsesIcon : undefined),
    isEnabled: () => !!currentNotebook(ctx),
    execute: async args => {
      const nb = currentNotebook(ctx, args as Record<string, unknown>);
      if (!nb) {
        return;
      }
      let defaults = {
        goldenPath: '',
        buildEnabled: settings.buildEnabled,
        timeout: settings.defaultTimeout
      };
      for (;;) {
        const result = await showDialog({
          title: `Validate ${nb.context.path}`,
          body: new ValidateOptionsBody(defaults),
          buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Validate' })],
          focusNodeSelector: 'input'
        });
        if (!result.button.accept || !result.value) {
          return;
        }
        defaults = result.value;
        if (!isValidTimeout(defaults.timeout)) {
          await showDialog({
            title: 'Invalid timeout',
            body: `"${defaults.timeout}" is not a duration such as 30m, 1h30m or 90s.`,
            buttons: [Dialog.okButton()]
          });
          continue;
        }
        break;
      }
      await submit(ctx, nb, defaults);
    }
  });
}
