/** Every command of the extension, registered (and put in the palette) in one call. */
import type { ICommandPalette } from '@jupyterlab/apputils';
import type { ICommandContext } from './context';
import { CommandIDs } from './ids';
import { addOpenPanelCommand } from './openPanel';
import { addValidateCommand } from './validate';
import { addValidateWithOptionsCommand } from './validateWithOptions';

export { CommandIDs } from './ids';
export type { ICommandContext } from './context';
export { currentNotebook, serverPath } from './context';
export { gotoCell } from './gotoCell';

export function addCommands(ctx: ICommandContext, palette: ICommandPalette | null): void {
  addValidateCommand(ctx);
  addValidateWithOptionsCommand(ctx);
  addOpenPanelCommand(ctx);
  if (palette) {
    const category = 'Notebook Validation';
    palette.addItem({ command: CommandIDs.validate, category });
    palette.addItem({ command: CommandIDs.validateWithOptions, category });
    palette.addItem({ command: CommandIDs.openPanel, category });
  }
}
