import * as React from 'react';
import type { IPanelActions } from '../actions';
import { formatDuration } from '../format';
import type { ValidationModel } from '../model';
import { PHASE_LABELS, isTerminal } from '../phases';
import { jobNotebook } from '../state';
import { ITimeline, computeTimeline, totalSeconds } from '../timeline';
import type { IJob } from '../types';
import { CellSummary } from './CellSummary';
import { Comparison } from './Comparison';
import { EventsList } from './EventsList';
import { FailureDetails } from './FailureDetails';
import { Links } from './Links';
import { Timeline } from './Timeline';

export function JobDetail(props: {
  model: ValidationModel;
  job: IJob;
  now: number;
  actions: IPanelActions;
}): JSX.Element {
  const { model, job, now, actions } = props;
  const name = job.metadata.name;
  const events = model.state.events[name];
  const timeline = computeTimeline(events, job, now);
  const status = job.status ?? {};
  const phase = status.phase ?? '';
  const terminal = isTerminal(phase);
  const verdictPhase = timeline.verdict ?? (phase || timeline.currentPhase || 'Pending');
  return (
    <section className="jp-NBValidation-detail" aria-label={`Job ${name}`}>
      <div className="jp-NBValidation-summary">
        <div
          className={`jp-NBValidation-verdict${terminal ? ' jp-mod-terminal' : ''}`}
          data-phase={verdictPhase}
          role="status"
        >
          {verdictText(verdictPhase, timeline)}
        </div>
        <div className="jp-NBValidation-meta">
          <span title="Job name">{name}</span>
          <span title="Notebook">{jobNotebook(job)}</span>
          {job.spec.goldenNotebook?.path && (
            <span title="Golden notebook">golden: {job.spec.goldenNotebook.path}</span>
          )}
        </div>
        {(status.reason || status.message) && (
          <div className="jp-NBValidation-message">
            {status.reason && <strong>{status.reason}</strong>}
            {status.reason && status.message ? ': ' : ''}
            {status.message}
          </div>
        )}
        {!terminal && (
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-mod-warn jp-NBValidation-cancel"
            onClick={() => void model.cancel(name).catch(() => undefined)}
          >
            Cancel
          </button>
        )}
      </div>
      <Timeline timeline={timeline} />
      <FailureDetails job={job} actions={actions} />
      <Comparison comparison={status.comparisonResult} job={job} actions={actions} />
      <CellSummary results={status.results} />
      <Links model={model} job={job} />
      <EventsList events={events} />
    </section>
  );
}

export function verdictText(phase: string, timeline: ITimeline): string {
  const total = formatDuration(totalSeconds(timeline));
  switch (phase) {
    case 'Succeeded':
      return `✓ Succeeded in ${total}`;
    case 'Failed':
      return `✗ Failed after ${total}`;
    case 'Pending':
      return 'Pending…';
    default:
      return `${PHASE_LABELS[phase] ?? phase}… (${total})`;
  }
}
