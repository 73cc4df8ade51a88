import * as React from 'react';
import type { IPanelActions } from '../actions';
import { formatDuration } from '../format';
import type { ValidationModel } from '../model';
import { PHASE_LABELS, isTerminal } from '../phases';
import { jobNotebook } from '../state';
import { ITimeline, computeTimeline, totalSeconds } from '../timeline';
import type { IChanges, IJob } from '../types';
import { jobSentence, learnDataDirs, reusedText } from '../words';
import {
  environmentText,
  isCancelled,
  isInfrastructureError,
  sinceLastSuccessText,
  verdictAttr
} from '../verdict';
import { BuildLog } from './BuildLog';
import { CellSummary } from './CellSummary';
import { Comparison } from './Comparison';
import { EventsList } from './EventsList';
import { FailureDetails } from './FailureDetails';
import { FindCause } from './FindCause';
import { Links } from './Links';
import { Progress } from './Progress';
import { Timeline } from './Timeline';

/** Cell types of the executed notebook of a finished job (for the cell summary), or null. */
function useCellTypes(model: ValidationModel, job: IJob): string[] | null {
  const name = job.metadata.name;
  const results = job.status?.results ?? [];
  const needed =
    isTerminal(job.status?.phase) && results.length > 0 && results.some(r => !r.cellType);
  const [types, setTypes] = React.useState<string[] | null>(null);
  React.useEffect(() => {
    if (!needed) {
      return;
    }
    let live = true;
    model
      .executedNotebook(name)
      .then(nb => {
        const cells = (nb?.cells as Array<{ cell_type?: string }> | undefined) ?? null;
        if (live && cells) {
          setTypes(cells.map(c => c.cell_type ?? 'code'));
        }
      })
      .catch(() => undefined);
    return () => {
      live = false;
    };
  }, [model, name, needed]);
  return types;
}

/** What changed since the notebook's last success, for a failed job (fetched once), or null. */
function useChanges(model: ValidationModel, job: IJob): IChanges | null {
  const name = job.metadata.name;
  const failed = job.status?.phase === 'Failed';
  const [changes, setChanges] = React.useState<IChanges | null>(null);
  React.useEffect(() => {
    if (!failed) {
      return;
    }
    let live = true;
    model
      .changes(name)
      .then(c => {
        if (live) {
          setChanges(c);
        }
      })
      .catch(() => undefined);
    return () => {
      live = false;
    };
  }, [model, name, failed]);
  return changes;
}

export function JobDetail(props: {
  model: ValidationModel;
  job: IJob;
  now: number;
  actions: IPanelActions;
}): JSX.Element {
  const { model, job, now, actions } = props;
  learnDataDirs(job);
  const name = job.metadata.name;
  const events = model.state.events[name];
  const timeline = computeTimeline(events, job, now);
  const status = job.status ?? {};
  const phase = status.phase ?? '';
  const terminal = isTerminal(phase);
  const cancelled = isCancelled(job);
  const verdictPhase = timeline.verdict ?? (phase || timeline.currentPhase || 'Pending');
  const cellTypes = useCellTypes(model, job);
  const changes = useChanges(model, job);
  const since = sinceLastSuccessText(job, changes, now);
  const sentence = jobSentence(job);
  const reused = reusedText(job, now);
  const environment = environmentText(job);
  // the build log comes first while it is the news: while Building, and when the build failed
  const buildNews =
    phase === 'Building' || status.reason === 'BuildFailed' || status.reason === 'BuildTimedOut';
  const buildLog = reused ? null : <BuildLog model={model} job={job} open={buildNews} />;
  // The order of a job (issue 42): the verdict in one sentence; the failing cell or the golden
  // diff; since the last success; the timeline; then what it ran in, and the collapsed details.
  return (
    <section className="jp-NBValidation-detail" aria-label={`Job ${name}`}>
      <div className="jp-NBValidation-summary">
        <div
          className={`jp-NBValidation-verdict${terminal ? ' jp-mod-terminal' : ''}`}
          data-phase={verdictPhase}
          data-verdict={terminal ? verdictAttr(job) : 'running'}
          data-reason={status.reason ?? ''}
          role="status"
        >
          {verdictText(verdictPhase, timeline, cancelled, isInfrastructureError(job))}
        </div>
        {sentence && (
          <div className="jp-NBValidation-message jp-NBValidation-sentence">{sentence}</div>
        )}
        {!terminal && (
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-mod-warn jp-NBValidation-cancel"
            onClick={() => void actions.cancel(job)}
          >
            Cancel
          </button>
        )}
      </div>
      <Progress job={job} now={now} />
      {buildNews && buildLog}
      <FailureDetails job={job} actions={actions} />
      <Comparison
        comparison={status.comparisonResult}
        job={job}
        actions={actions}
        accepted={model.acceptedCells(name)}
      />
      {since && (
        <div
          className="jp-NBValidation-since"
          title="What changed since this notebook last passed (packages from the two environment records)"
        >
          {since}
        </div>
      )}
      <FindCause api={model.api} job={job} changes={changes} />
      <Timeline timeline={timeline} cancelled={cancelled} />
      <div className="jp-NBValidation-meta">
        <div>
          <span className="jp-NBValidation-metaKey">Notebook </span>
          <span title="Notebook">{jobNotebook(job)}</span>
        </div>
        {job.spec.goldenNotebook?.path && (
          <div>
            <span className="jp-NBValidation-metaKey">Golden </span>
            <span title="Golden notebook">{job.spec.goldenNotebook.path}</span>
          </div>
        )}
        {(environment || reused) && (
          <div className="jp-NBValidation-environment" title="What the environment is built from">
            {environment ?? 'Environment:'}
            {reused && <span className="jp-NBValidation-reused">{` — ${reused}`}</span>}
          </div>
        )}
        <div>
          <span className="jp-NBValidation-metaKey">Job </span>
          <span title="Job name" className="jp-NBValidation-jobFullName">
            {name}
          </span>
        </div>
      </div>
      <CellSummary results={status.results} cellTypes={cellTypes} />
      <Links job={job} actions={actions} />
      {!buildNews && buildLog}
      <EventsList events={events} open={!terminal} />
    </section>
  );
}

export function verdictText(
  phase: string,
  timeline: ITimeline,
  cancelled = false,
  infrastructure = false
): string {
  const total = formatDuration(totalSeconds(timeline));
  switch (phase) {
    case 'Succeeded':
      return `✓ Succeeded in ${total}`;
    case 'Failed':
      if (infrastructure) {
        // not the notebook's failure: the cause is in the message below
        return `⚠ Infrastructure error after ${total}`;
      }
      return cancelled ? `⊘ Cancelled after ${total}` : `✗ Failed after ${total}`;
    case 'Pending':
      return 'Pending…';
    default:
      return `${PHASE_LABELS[phase] ?? phase}… (${total})`;
  }
}
