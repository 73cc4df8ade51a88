/** What the commands share: the application parts and a few helpers (built once in index.ts). */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { IDocumentManager } from '@jupyterlab/docmanager';
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { ValidationModel } from '../model';
import type { ISettings } from '../settings';

export interface ICommandContext {
  app: JupyterFrontEnd;
  tracker: INotebookTracker;
  docManager: IDocumentManager;
  model: ValidationModel;
  settings: ISettings;
  /** Open (or reveal) the validation side panel. */
  openPanel(): void;
}

/** The server-side path of a notebook panel. */
export function serverPath(ctx: ICommandContext, panel: NotebookPanel): string {
  return ctx.docManager.services.contents.localPath(panel.context.path);
}

/** The notebook a command acts on: `args.path` when it is open, else the active one. */
export function currentNotebook(
  ctx: ICommandContext,
  args: Record<string, unknown> = {}
): NotebookPanel | null {
  if (args.path && typeof args.path === 'string') {
    const found = ctx.tracker.find(p => serverPath(ctx, p) === args.path);
    if (found) {
      return found;
    }
  }
  return ctx.tracker.currentWidget;
}
