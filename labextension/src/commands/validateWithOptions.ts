/**
 * "Validate Notebook with Options…": a dialog for the golden notebook, build, timeouts,
 * tolerances, ignored outputs, parameters and lax mode. Its values are the project's settings
 * for this notebook (GET …/project-settings: the `[tool.nbvalidation]` table of the project's
 * pyproject.toml, or nbvalidation.toml), and "Save for this project" (the default) writes them
 * there before validating; "Only this time" sends them with this job's spec and writes nothing.
 * On a server without project settings the options go with the job and this browser remembers
 * them (remembered.ts, the fallback). A field the checks or the server refuse reopens the
 * dialog with the values kept and the reason, in words, at that field.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { ellipsesIcon } from '@jupyterlab/ui-components';
import { IOptionsChoice, SaveMode, ValidateOptionsBody, emptyOptions } from '../dialog';
import { APIError } from '../errors';
import { describe } from '../model';
import {
  IProjectSettings,
  entryFromValues,
  fileWords,
  valuesFromOptions
} from '../projectsettings';
import { rememberedOptions, rememberOptions } from '../remembered';
import { checkOptions, IOptionError, optionOfSpecField } from '../spec';
import { plainMessage } from '../words';
import { ICommandContext, currentNotebook, serverPath } from './context';
import { CommandIDs } from './ids';
import { submit } from './submit';

/** The project settings of `path`, or null (no route); an unreadable file is said, then null. */
export async function readProjectSettings(
  ctx: ICommandContext,
  path: string
): Promise<IProjectSettings | null | 'error'> {
  const api = ctx.model.api;
  if (!api.projectSettings) {
    return null;
  }
  try {
    return await api.projectSettings(path);
  } catch (e) {
    Notification.error(`The project settings cannot be read: ${plainMessage(describe(e), path)}`, {
      autoClose: 12000
    });
    return 'error';
  }
}

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
      const defaults = emptyOptions(settings.buildEnabled, settings.defaultTimeout);
      const read = await readProjectSettings(ctx, path);
      if (read === 'error') {
        return;
      }
      const project = read;
      let values = project
        ? valuesFromOptions(project.options, { ...defaults, timeout: '' })
        : (rememberedOptions(path) ?? defaults);
      let save: SaveMode = project ? 'project' : 'once';
      let errors: IOptionError[] = [];
      for (;;) {
        const result = await showDialog<IOptionsChoice>({
          title: `Validate ${nb.context.path}`,
          body: new ValidateOptionsBody(values, errors, project ? fileWords(project) : null, save),
          buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Validate' })],
          focusNodeSelector: errors.some(e => e.option)
            ? '[aria-invalid="true"]'
            : 'input[type="text"]'
        });
        if (!result.button.accept || !result.value) {
          return;
        }
        const { save: chosen, ...typed } = result.value;
        values = typed;
        save = chosen;
        errors = checkOptions(values);
        if (errors.length) {
          continue;
        }
        // submitted first: the server checks the whole spec (a golden notebook that is not there
        // included), so a refused option is never written into the project's file
        const sent = await submit(ctx, nb, values, { returnFieldErrors: true });
        if (sent) {
          errors = sent;
          continue;
        }
        if (!project) {
          rememberOptions(path, values); // no project settings here: "Validate" repeats them
        } else if (save === 'project') {
          const refused = await saveForProject(ctx, path, values, project);
          if (Array.isArray(refused)) {
            Notification.error(
              `The validation was submitted, but its options were ${refused[0].message}`,
              { autoClose: 12000 }
            );
          }
        }
        return;
      }
    }
  });
}

/** PUT the notebook's entry; the new settings, or the refused fields (in words). */
async function saveForProject(
  ctx: ICommandContext,
  path: string,
  values: IOptionsChoice | Omit<IOptionsChoice, 'save'>,
  project: IProjectSettings
): Promise<IProjectSettings | IOptionError[]> {
  const entry = entryFromValues(path, values, project);
  try {
    return await ctx.model.api.saveProjectSettings!(path, entry);
  } catch (e) {
    const field = e instanceof APIError ? e.field : null;
    const message = plainMessage(e instanceof Error ? e.message : String(e), path);
    return [
      {
        option: optionOfSpecField(field),
        field: field ? field.replace(/^(spec|options)\./, '') : 'spec',
        message: `not saved in ${project.file}: ${message}`
      }
    ];
  }
}
