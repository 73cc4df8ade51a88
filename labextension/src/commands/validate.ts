/**
 * "Validate Notebook": save and validate with the options this notebook was last
 * validated with in the Options dialog (its golden notebook compared with again),
 * else the settings' defaults.
 */
import { validateIcon } from '../icons';
import { rememberedOptions } from '../remembered';
import { ICommandContext, currentNotebook, serverPath } from './context';
import { CommandIDs } from './ids';
import { submit } from './submit';

export function addValidateCommand(ctx: ICommandContext): void {
  const { settings } = ctx;
  ctx.app.commands.addCommand(CommandIDs.validate, {
    label: args => (args.toolbar ? 'Validate' : 'Validate Notebook'),
    caption: 'Save the notebook and validate it in a clean environment',
    icon: validateIcon,
    isEnabled: () => !!currentNotebook(ctx),
    execute: async args => {
      const nb = currentNotebook(ctx, args as Record<string, unknown>);
      if (!nb) {
        return;
      }
      await submit(
        ctx,
        nb,
        rememberedOptions(serverPath(ctx, nb)) ?? {
          buildEnabled: settings.buildEnabled,
          timeout: settings.defaultTimeout
        }
      );
    }
  });
}
