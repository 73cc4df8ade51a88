/**
 * jupyter-nbvalidation: Validate button and command, options dialog, the
 * validation side panel and a status-bar verdict.
 *
 * `activate` only wires: the commands live in ./commands, the panel's
 * components in ./components, the live updates in ./live.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import {
  INotebookTracker,
  INotebookWidgetFactory,
  NotebookWidgetFactory
} from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { acceptAsGolden, confirmCancel } from './accept';
import { decorateFileBrowser } from './badges';
import { NBValidationAPI } from './api';
import { CommandIDs, ICommandContext, addCommands, gotoCell } from './commands';
import { followLiveUpdates, followNotebooks, reportServerState } from './live';
import { downloadExecuted, downloadLock, openExecuted, setupExecutedNotebooks } from './executed';
import { describe, ValidationModel } from './model';
import { Notification } from '@jupyterlab/apputils';
import { followNotifications } from './notifications';
import { PANEL_ID, ValidationPanel } from './panel';
import { trackSettings } from './settings';
import { ValidationStatus } from './statusbar';

export const PLUGIN_ID = 'jupyter-nbvalidation:plugin';

export { CommandIDs };

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Validate notebooks in a clean environment and follow the job in a side panel.',
  autoStart: true,
  requires: [INotebookTracker, IDocumentManager],
  optional: [
    ICommandPalette,
    ISettingRegistry,
    ILayoutRestorer,
    IStatusBar,
    ILabShell,
    INotebookWidgetFactory,
    IDefaultFileBrowser
  ],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    docManager: IDocumentManager,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    labShell: ILabShell | null,
    notebookFactory: NotebookWidgetFactory.IFactory | null,
    fileBrowser: IDefaultFileBrowser | null
  ) => {
    const api = new NBValidationAPI(app.serviceManager.serverSettings);
    const model = new ValidationModel(api);
    const haveFactory = setupExecutedNotebooks(app, api, notebookFactory);
    const ctx: ICommandContext = {
      app,
      tracker,
      docManager,
      model,
      settings: trackSettings(PLUGIN_ID, settingRegistry),
      openPanel: () => {
        if (!panel.isAttached) {
          app.shell.add(panel, 'right', { rank: 600 });
        }
        app.shell.activateById(panel.id);
      }
    };

    const panel = new ValidationPanel(model, {
      validate: () => void app.commands.execute(CommandIDs.validate),
      validateWithOptions: () => void app.commands.execute(CommandIDs.validateWithOptions),
      canValidate: () => !!tracker.currentWidget,
      gotoCell: (path, index) => gotoCell(ctx, path, index),
      cancel: async job => {
        if (await confirmCancel(job)) {
          await model.cancel(job.metadata.name).catch(e =>
            Notification.error(`Could not cancel ${job.metadata.name}: ${describe(e)}`, {
              autoClose: 8000
            })
          );
        }
      },
      openExecuted: async job => {
        await openExecuted(docManager, job, haveFactory);
      },
      downloadExecuted: job => downloadExecuted(api, job),
      downloadLock: job => downloadLock(api, job),
      acceptGolden: async (job, index) => {
        await acceptAsGolden(model, app.serviceManager.contents, docManager, job, index);
      },
      acceptAllGolden: async (job, indexes) => {
        await acceptAsGolden(model, app.serviceManager.contents, docManager, job, indexes);
      }
    });
    panel.title.caption = 'Notebook validation';
    app.shell.add(panel, 'right', { rank: 600 });
    if (restorer) {
      restorer.add(panel, PANEL_ID);
    }

    addCommands(ctx, palette);
    const follow = followNotebooks(ctx);

    if (statusBar) {
      statusBar.registerStatusItem('jupyter-nbvalidation:status', {
        item: new ValidationStatus(model, ctx.openPanel),
        align: 'left',
        rank: 4,
        isActive: () =>
          !!tracker.currentWidget && (!labShell || labShell.currentWidget === tracker.currentWidget)
      });
    }

    followLiveUpdates(app, model);
    if (fileBrowser) {
      decorateFileBrowser(fileBrowser, model);
    }
    void app.restored.then(async () => {
      follow();
      followNotifications(api, name => {
        model.setScope('all');
        model.select(name);
        ctx.openPanel();
      });
      await reportServerState(model);
    });
  }
};

export default plugin;
