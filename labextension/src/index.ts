/**
 * jupyter-nbvalidation: Validate button and command, options dialog, the
 * validation side panel and a status-bar verdict.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, Notification, showDialog } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ellipsesIcon } from '@jupyterlab/ui-components';
import { NBValidationAPI } from './api';
import { ValidateOptionsBody } from './dialog';
import { validateIcon } from './icons';
import { ValidationModel, describe } from './model';
import { PANEL_ID, ValidationPanel } from './panel';
import { buildSpec, isValidTimeout } from './spec';
import { ValidationStatus } from './statusbar';
import { ILiveJobEvent, JOB_EVENT_SCHEMA } from './types';

export const PLUGIN_ID = 'jupyter-nbvalidation:plugin';

export namespace CommandIDs {
  export const validate = 'nbvalidation:validate';
  export const validateWithOptions = 'nbvalidation:validate-with-options';
  export const openPanel = 'nbvalidation:open-panel';
}

interface ISettings {
  defaultTimeout: string;
  buildEnabled: boolean;
  openPanelOnValidate: boolean;
}

const DEFAULTS: ISettings = { defaultTimeout: '', buildEnabled: true, openPanelOnValidate: true };

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
    const api = new NBValidationAPI(app.serviceManager.serverSettings);
    const model = new ValidationModel(api);
    const settings: ISettings = { ...DEFAULTS };

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(s => {
          const read = () => {
            settings.defaultTimeout = String(s.get('defaultTimeout').composite ?? '');
            settings.buildEnabled = s.get('buildEnabled').composite !== false;
            settings.openPanelOnValidate = s.get('openPanelOnValidate').composite !== false;
          };
          read();
          s.changed.connect(read);
        })
        .catch(reason => console.warn('jupyter-nbvalidation: cannot load settings', reason));
    }

    const serverPath = (panel: NotebookPanel): string =>
      docManager.services.contents.localPath(panel.context.path);

    const currentNotebook = (args: Record<string, unknown> = {}): NotebookPanel | null => {
      const w = tracker.currentWidget;
      if (args.path && typeof args.path === 'string') {
        const found = tracker.find(p => serverPath(p) === args.path);
        if (found) {
          return found;
        }
      }
      return w;
    };

    const openPanel = () => {
      if (!panel.isAttached) {
        app.shell.add(panel, 'right', { rank: 600 });
      }
      app.shell.activateById(panel.id);
    };

    const actions = {
      validate: () => void app.commands.execute(CommandIDs.validate),
      validateWithOptions: () => void app.commands.execute(CommandIDs.validateWithOptions),
      canValidate: () => !!tracker.currentWidget,
      gotoCell: async (path: string, index: number) => {
        const widget = docManager.openOrReveal(path);
        if (!widget) {
          Notification.error(`Cannot open ${path}`, { autoClose: 5000 });
          return;
        }
        await widget.context.ready;
        const nbPanel = tracker.find(p => p === widget) ?? (widget as unknown as NotebookPanel);
        await nbPanel.revealed;
        app.shell.activateById(nbPanel.id);
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
    };

    const panel = new ValidationPanel(model, actions);
    panel.title.caption = 'Notebook validation';
    app.shell.add(panel, 'right', { rank: 600 });
    if (restorer) {
      restorer.add(panel, PANEL_ID);
    }

    const submit = async (nb: NotebookPanel, options: { goldenPath?: string; buildEnabled?: boolean; timeout?: string }) => {
      try {
        await nb.context.save();
      } catch (e) {
        Notification.error(`Could not save ${nb.context.path}: ${describe(e)}`, { autoClose: 8000 });
        return;
      }
      const spec = buildSpec(serverPath(nb), options);
      try {
        const job = await model.submit(spec);
        if (settings.openPanelOnValidate) {
          openPanel();
        } else {
          Notification.info(`Validation of ${spec.notebook.path} submitted (${job.metadata.name}).`, {
            autoClose: 4000,
            actions: [{ label: 'Show', callback: openPanel }]
          });
        }
      } catch (e) {
        Notification.error(`Validation could not be submitted: ${describe(e)}`, { autoClose: 10000 });
      }
    };

    app.commands.addCommand(CommandIDs.validate, {
      label: args => (args.toolbar ? 'Validate' : 'Validate Notebook'),
      caption: 'Save the notebook and validate it in a clean environment',
      icon: validateIcon,
      isEnabled: () => !!currentNotebook(),
      execute: async args => {
        const nb = currentNotebook(args as Record<string, unknown>);
        if (!nb) {
          return;
        }
        await submit(nb, { buildEnabled: settings.buildEnabled, timeout: settings.defaultTimeout });
      }
    });

    app.commands.addCommand(CommandIDs.validateWithOptions, {
      label: args => (args.toolbar ? '' : 'Validate Notebook with Options…'),
      caption: 'Validate with options: golden notebook, build on/off, timeout',
      icon: args => (args.toolbar ? ellipsesIcon : undefined),
      isEnabled: () => !!currentNotebook(),
      execute: async args => {
        const nb = currentNotebook(args as Record<string, unknown>);
        if (!nb) {
          return;
        }
        let defaults = {
          goldenPath: '',
          buildEnabled: settings.buildEnabled,
          timeout: settings.defaultTimeout
        };
        for (;;) {
          const result = await showDialog({
            title: `Validate ${nb.context.path}`,
            body: new ValidateOptionsBody(defaults),
            buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Validate' })],
            focusNodeSelector: 'input'
          });
          if (!result.button.accept || !result.value) {
            return;
          }
          defaults = result.value;
          if (!isValidTimeout(defaults.timeout)) {
            await showDialog({
              title: 'Invalid timeout',
              body: `"${defaults.timeout}" is not a duration such as 30m, 1h30m or 90s.`,
              buttons: [Dialog.okButton()]
            });
            continue;
          }
          break;
        }
        await submit(nb, defaults);
      }
    });

    app.commands.addCommand(CommandIDs.openPanel, {
      label: 'Show Validation Panel',
      caption: 'Open the notebook validation side panel',
      execute: openPanel
    });

    if (palette) {
      const category = 'Notebook Validation';
      palette.addItem({ command: CommandIDs.validate, category });
      palette.addItem({ command: CommandIDs.validateWithOptions, category });
      palette.addItem({ command: CommandIDs.openPanel, category });
    }

    const notifyCommands = () => {
      app.commands.notifyCommandChanged(CommandIDs.validate);
      app.commands.notifyCommandChanged(CommandIDs.validateWithOptions);
    };

    // Follow the active notebook (the panel's "this notebook" and the status bar).
    const follow = () => {
      const nb = tracker.currentWidget;
      model.setNotebook(nb ? serverPath(nb) : null);
      notifyCommands();
    };
    tracker.currentChanged.connect(follow);
    tracker.widgetAdded.connect((_, nb) => {
      // a rename moves the path
      nb.context.pathChanged.connect(() => {
        if (nb === tracker.currentWidget) {
          model.setNotebook(serverPath(nb));
        }
      });
    });

    if (statusBar) {
      const item = new ValidationStatus(model, openPanel);
      statusBar.registerStatusItem('jupyter-nbvalidation:status', {
        item,
        align: 'left',
        rank: 4,
        isActive: () => !!tracker.currentWidget && (!labShell || labShell.currentWidget === tracker.currentWidget)
      });
    }

    // Live updates from the server's jupyter_events stream.
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

    void app.restored.then(async () => {
      follow();
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
    });
  }
};

export default plugin;
