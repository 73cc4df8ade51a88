/**
 * The validation side panel: job list (this notebook / all notebooks) and,
 * for the selected job, the verdict, the phase timeline, failure details with
 * "Go to cell", the golden comparison, the events and links to artefacts.
 */
import * as React from 'react';
import { ReactWidget } from '@jupyterlab/ui-components';
import type { IPanelActions } from './actions';
import { PanelView } from './components/PanelView';
import { validateIcon } from './icons';
import type { ValidationModel } from './model';

export type { IPanelActions } from './actions';

export const PANEL_ID = 'nbvalidation-panel';

export class ValidationPanel extends ReactWidget {
  constructor(
    readonly model: ValidationModel,
    readonly actions: IPanelActions
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-NBValidation-panel');
    this.title.icon = validateIcon;
    this.title.caption = 'Notebook validation';
  }

  render(): JSX.Element {
    return <PanelView model={this.model} actions={this.actions} />;
  }
}
