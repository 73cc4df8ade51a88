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
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { NBValidationAPI } from './api';
import { CommandIDs, ICommandContext, addCommands, gotoCell } from './commands';
import { followLiveUpdates, followNotebooks, reportServerState } from './live';
import { ValidationModel } from './model';
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
  optional: [ICommandPalette, ISettingRegistry, ILayoutRestorer, IStatusBar, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    docManager: IDocumentManager,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    labShell: ILabShell | null
  ) => {
    const model = new ValidationModel(new NBValidationAPI(app.serviceManager.serverSettings));
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
      gotoCell: (path, index) => gotoCell(ctx, path, index)
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
    void app.restored.then(async () => {
      follow();
      await reportServerState(model);
    });
  }
};

export default plugin;
