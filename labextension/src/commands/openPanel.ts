/** "Show Validation Panel". */
import type { ICommandContext } from './context';
import { CommandIDs } from './ids';

export function addOpenPanelCommand(ctx: ICommandContext): void {
  ctx.app.commands.addCommand(CommandIDs.openPanel, {
    label: 'Show Validation Panel',
    caption: 'Open the notebook validation side panel',
    execute: ctx.openPanel
  });
}
