import * as React from 'react';
import type { IPanelActions } from '../actions';
import type { ValidationModel } from '../model';
import type { SchedulesModel } from '../schedules';
import { JobDetail } from './JobDetail';
import { JobList } from './JobList';
import { SchedulesView, ViewTabs, useSchedules, viewPanelId, viewTabId } from './Schedules';
import { ServerBanner } from './ServerBanner';
import { useModel } from './useModel';

export function PanelView(props: {
  model: ValidationModel;
  actions: IPanelActions;
  schedules?: SchedulesModel;
}): JSX.Element {
  const { model, actions, schedules } = props;
  const now = useModel(model);
  useSchedules(schedules); // the view shown (Jobs | Schedules)
  const onSchedules = !!schedules && schedules.view === 'schedules';
  const state = model.state;
  const jobs = model.visibleJobs;
  const job = model.selectedJob;
  return (
    <div className="jp-NBValidation-root">
      <div className="jp-NBValidation-header">
        <h2 className="jp-NBValidation-title">Notebook validation</h2>
        <div className="jp-NBValidation-actions">
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-mod-accept jp-NBValidation-validate"
            disabled={!actions.canValidate()}
            onClick={() => actions.validate()}
            title="Save and validate the active notebook"
          >
            Validate
          </button>
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-NBValidation-options"
            disabled={!actions.canValidate()}
            onClick={() => actions.validateWithOptions()}
            title="Validate with a golden notebook, tolerances, ignored outputs, timeouts, parameters or lax mode"
          >
            Options…
          </button>
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-NBValidation-refresh"
            onClick={() => void (onSchedules ? schedules.refresh() : model.refresh())}
            title={onSchedules ? 'Reload schedules' : 'Reload jobs'}
            aria-label={onSchedules ? 'Reload schedules' : 'Reload jobs'}
          >
            ⟳
          </button>
        </div>
      </div>
      <ServerBanner model={model} />
      {schedules && <ViewTabs model={schedules} />}
      {onSchedules ? (
        <SchedulesView model={schedules} />
      ) : (
        <div
          className="jp-NBValidation-jobsView"
          role={schedules ? 'tabpanel' : undefined}
          id={schedules ? viewPanelId('jobs') : undefined}
          aria-labelledby={schedules ? viewTabId('jobs') : undefined}
        >
          <div className="jp-NBValidation-scope" role="group" aria-label="Which jobs to list">
            <button
              type="button"
              className={`jp-NBValidation-scopeButton${state.scope === 'notebook' ? ' jp-mod-active' : ''}`}
              aria-pressed={state.scope === 'notebook'}
              onClick={() => model.setScope('notebook')}
            >
              This notebook
            </button>
            <button
              type="button"
              className={`jp-NBValidation-scopeButton${state.scope === 'all' ? ' jp-mod-active' : ''}`}
              aria-pressed={state.scope === 'all'}
              onClick={() => model.setScope('all')}
            >
              All notebooks
            </button>
          </div>
          {state.scope === 'notebook' && (
            <div className="jp-NBValidation-notebook" title={state.notebookPath ?? ''}>
              {state.notebookPath ? state.notebookPath : 'No notebook is active.'}
            </div>
          )}
          {model.error && (
            <div className="jp-NBValidation-error" role="alert">
              {model.error}
            </div>
          )}
          <JobList model={model} jobs={jobs} now={now} />
          {job ? (
            <JobDetail
              key={job.metadata.name}
              model={model}
              job={job}
              now={now}
              actions={actions}
            />
          ) : (
            <div className="jp-NBValidation-empty">
              {jobs.length ? 'Select a job.' : 'No validation jobs yet. Press Validate to run one.'}
            </div>
          )}
        </div>
      )}
    </div>
  );
}
