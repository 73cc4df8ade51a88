/** The panel's "Go to cell": open a notebook and select one of its cells. */
import { Notification } from '@jupyterlab/apputils';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { ICommandContext } from './context';

export async function gotoCell(ctx: ICommandContext, path: string, index: number): Promise<void> {
  const widget = ctx.docManager.openOrReveal(path);
  if (!widget) {
    Notification.error(`Cannot open ${path}`, { autoClose: 5000 });
    return;
  }
  await widget.context.ready;
  const nbPanel = ctx.tracker.find(p => p === widget) ?? (widget as unknown as NotebookPanel);
  await nbPanel.revealed;
  ctx.app.shell.activateById(nbPanel.id);
  const notebook = nbPanel.content;
  if (!notebook || index < 0 || index >= notebook.widgets.length) {
    Notification.warning(
      `${path} has no cell ${index} (it has ${notebook?.widgets.length ?? 0}); it changed since the validation.`,
      { autoClose: 5000 }
    );
    return;
  }
  notebook.mode = 'command';
  notebook.deselectAll();
  notebook.activeCellIndex = index;
  await notebook.scrollToItem(index, 'center').catch(() => undefined);
  notebook.node.focus();
}
