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
import { NBValidationAPI } from './api';
import { SchedulesAPI, SchedulesModel } from './schedules';
import type { Message } from '@lumino/messaging';

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
    // the Schedules tab: over the panel's REST client (a model without one has no such tab)
    this.schedules =
      model.api instanceof NBValidationAPI
        ? new SchedulesModel(new SchedulesAPI(model.api), model)
        : null;
  }

  /** The Schedules tab's model (re-read only while the tab is seen). */
  readonly schedules: SchedulesModel | null;

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.schedules?.setVisible(true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.schedules?.setVisible(false);
  }

  dispose(): void {
    this.schedules?.dispose();
    super.dispose();
  }

  render(): JSX.Element {
    return (
      <PanelView
        model={this.model}
        actions={this.actions}
        schedules={this.schedules ?? undefined}
      />
    );
  }
}
