/**
 * Keeping the model current: the active notebook, the server's live job
 * events, and a reconcile with one GET when the page comes back.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { ICommandContext, serverPath } from './commands';
import { CommandIDs } from './commands/ids';
import type { ValidationModel } from './model';
import { ILiveJobEvent, JOB_EVENT_SCHEMA } from './types';

/**
 * Follow the active notebook (the panel's "this notebook" and the status
 * bar) and its renames; returns the function that re-reads the active one.
 */
export function followNotebooks(ctx: ICommandContext): () => void {
  const { app, tracker, model } = ctx;
  const follow = () => {
    const nb = tracker.currentWidget;
    model.setNotebook(nb ? serverPath(ctx, nb) : null);
    app.commands.notifyCommandChanged(CommandIDs.validate);
    app.commands.notifyCommandChanged(CommandIDs.validateWithOptions);
  };
  tracker.currentChanged.connect(follow);
  tracker.widgetAdded.connect((_, nb) => {
    // a rename moves the path
    nb.context.pathChanged.connect(() => {
      if (nb === tracker.currentWidget) {
        model.setNotebook(serverPath(ctx, nb));
      }
    });
  });
  return follow;
}

/** Live updates from the server's jupyter_events stream, and reconciles after gaps. */
export function followLiveUpdates(app: JupyterFrontEnd, model: ValidationModel): void {
  app.serviceManager.events.stream.connect((_, event) => {
    if (event.schema_id === JOB_EVENT_SCHEMA) {
      model.onLiveEvent(event as unknown as ILiveJobEvent);
    }
  });
  // Reconcile with one GET when the page comes back or the network returns
  // (the event socket may have dropped events meanwhile).
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) {
      void model.refresh();
    }
  });
  window.addEventListener('online', () => void model.refresh());
}

/** Probe the server extension once the lab is restored; say so when it is missing or unusable. */
export async function reportServerState(model: ValidationModel): Promise<void> {
  const state = await model.probe();
  if (state === 'missing') {
    Notification.error(
      'The jupyter_nbvalidation server extension is not enabled: notebook validation is unavailable. ' +
        'Enable it with "jupyter server extension enable jupyter_nbvalidation" and restart Jupyter.',
      { autoClose: false }
    );
    return;
  }
  if (state === 'unusable') {
    Notification.warning(`Notebook validation backend is not usable: ${model.serverDetail}`, {
      autoClose: 10000
    });
  }
  void model.refresh();
}
