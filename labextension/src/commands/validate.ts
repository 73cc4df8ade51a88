/**
 * "Validate Notebook": save and validate with the project's settings for this notebook (the
 * server reads them: `[tool.nbvalidation]` in pyproject.toml, or nbvalidation.toml), else —
 * on a server without project settings — with the options this browser remembers from the
 * Options dialog, else the lab settings' defaults.
 */
import { validateIcon } from '../icons';
import { rememberedOptions } from '../remembered';
import { ICommandContext, currentNotebook, serverPath } from './context';
import { CommandIDs } from './ids';
import { submit } from './submit';
import { readProjectSettings } from './validateWithOptions';

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
      const path = serverPath(ctx, nb);
      const project = await readProjectSettings(ctx, path);
      if (project === 'error') {
        return;
      }
      if (project) {
        // the server applies the file to every field the spec leaves out: send only what the
        // lab's own settings say and the file does not
        const o = project.options;
        await submit(ctx, nb, {
          buildEnabled:
            o.podConfig?.buildConfig?.enabled === undefined ? settings.buildEnabled : undefined,
          timeout: o.timeout === undefined ? settings.defaultTimeout : undefined
        });
        return;
      }
      await submit(
        ctx,
        nb,
        rememberedOptions(path) ?? {
          buildEnabled: settings.buildEnabled,
          timeout: settings.defaultTimeout
        }
      );
    }
  });
}
