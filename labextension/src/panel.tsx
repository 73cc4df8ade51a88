/**
 * The validation side panel: job list (this notebook / all notebooks) and,
 * for the selected job, the verdict, the phase timeline, failure details with
 * "Go to cell", the golden comparison, the events and links to artefacts.
 */
import * as React from 'react';
import { ReactWidget } from '@jupyterlab/ui-components';
import { validateIcon } from './icons';
import type { ValidationModel } from './model';
import { PHASE_LABELS, isTerminal } from './phases';
import { jobNotebook, jobPhase } from './state';
import {
  ITimeline,
  ITimelinePhase,
  barGeometry,
  computeTimeline,
  totalSeconds
} from './timeline';
import { basename, formatAgo, formatClock, formatDuration, parseTime, stripAnsi } from './format';
import type { ICellResult, IComparisonResult, IJob, IJobEvent } from './types';

export const PANEL_ID = 'nbvalidation-panel';

export interface IPanelActions {
  /** Validate the active notebook (runs the command). */
  validate(): void;
  /** Validate with options (runs the command). */
  validateWithOptions(): void;
  /** Open `path` and select cell `index`. */
  gotoCell(path: string, index: number): Promise<void> | void;
  /** Whether a notebook is active (enables Validate). */
  canValidate(): boolean;
}

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

/** Re-render on model changes; tick every second while the job runs. */
function useModel(model: ValidationModel): number {
  const [, setVersion] = React.useState(0);
  React.useEffect(() => {
    const onChange = () => setVersion(v => v + 1);
    model.changed.connect(onChange);
    return () => {
      model.changed.disconnect(onChange);
    };
  }, [model]);
  const running = !!model.selectedJob && !isTerminal(jobPhase(model.selectedJob));
  const [now, setNow] = React.useState(Date.now());
  React.useEffect(() => {
    if (!running) {
      setNow(Date.now());
      return;
    }
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, [running]);
  return running ? now : Date.now();
}

function PanelView(props: { model: ValidationModel; actions: IPanelActions }): JSX.Element {
  const { model, actions } = props;
  const now = useModel(model);
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
            title="Validate with a golden notebook, build setting or timeout"
          >
            Options…
          </button>
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-NBValidation-refresh"
            onClick={() => void model.refresh()}
            title="Reload jobs"
            aria-label="Reload jobs"
          >
            ⟳
          </button>
        </div>
      </div>
      <ServerBanner model={model} />
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
        <JobDetail key={job.metadata.name} model={model} job={job} now={now} actions={actions} />
      ) : (
        <div className="jp-NBValidation-empty">
          {jobs.length ? 'Select a job.' : 'No validation jobs yet. Press Validate to run one.'}
        </div>
      )}
    </div>
  );
}

function ServerBanner(props: { model: ValidationModel }): JSX.Element | null {
  const { model } = props;
  switch (model.server) {
    case 'missing':
      return (
        <div className="jp-NBValidation-error" role="alert">
          The jupyter_nbvalidation server extension is not enabled on this Jupyter server. Run{' '}
          <code>jupyter server extension enable jupyter_nbvalidation</code> and restart the server.
        </div>
      );
    case 'unusable':
      return (
        <div className="jp-NBValidation-warning" role="status">
          The validation backend is not usable: {model.serverDetail}
        </div>
      );
    case 'unreachable':
      return (
        <div className="jp-NBValidation-warning" role="status">
          Cannot reach the validation API: {model.serverDetail}
        </div>
      );
    default:
      return null;
  }
}

function PhaseBadge(props: { phase: string }): JSX.Element {
  const phase = props.phase || 'Pending';
  return (
    <span className="jp-NBValidation-badge" data-phase={phase}>
      {PHASE_LABELS[phase] ?? phase}
    </span>
  );
}

function JobList(props: { model: ValidationModel; jobs: IJob[]; now: number }): JSX.Element | null {
  const { model, jobs, now } = props;
  if (!jobs.length) {
    return null;
  }
  const showNotebook = model.state.scope === 'all';
  return (
    <ul className="jp-NBValidation-jobs" aria-label="Validation jobs">
      {jobs.map(job => {
        const name = job.metadata.name;
        const selected = name === model.state.selected;
        return (
          <li key={name}>
            <button
              type="button"
              className={`jp-NBValidation-job${selected ? ' jp-mod-selected' : ''}`}
              aria-current={selected}
              data-job={name}
              onClick={() => model.select(name)}
              title={`${name}\n${jobNotebook(job)}`}
            >
              <PhaseBadge phase={jobPhase(job)} />
              <span className="jp-NBValidation-jobName">
                {showNotebook ? basename(jobNotebook(job)) : name}
              </span>
              <span className="jp-NBValidation-jobAge">
                {formatAgo(parseTime(job.metadata.creationTimestamp), now)}
              </span>
            </button>
          </li>
        );
      })}
    </ul>
  );
}

function JobDetail(props: {
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

function verdictText(phase: string, timeline: ITimeline): string {
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

function Timeline(props: { timeline: ITimeline }): JSX.Element {
  const { timeline } = props;
  if (!timeline.phases.length) {
    return <div className="jp-NBValidation-timeline jp-mod-empty">No phases recorded yet.</div>;
  }
  return (
    <div className="jp-NBValidation-section">
      <h3 className="jp-NBValidation-sectionTitle">
        Timeline
        <span className="jp-NBValidation-source" title="Where the timeline comes from">
          {timeline.source === 'events' ? 'from events' : `from ${timeline.source}`}
        </span>
      </h3>
      <div className="jp-NBValidation-timelineGrid">
        <ol className="jp-NBValidation-timeline" aria-label="Phase timeline">
          {timeline.phases.map(p => (
            <TimelineRow key={p.phase} timeline={timeline} phase={p} />
          ))}
        </ol>
        <div className="jp-NBValidation-row jp-NBValidation-axisRow" aria-hidden="true">
          <span className="jp-NBValidation-axisStart" title="Start time">
            {formatClock(timeline.axisStart).slice(0, 8)}
          </span>
          <span className="jp-NBValidation-axis">
            <span>0s</span>
            <span>{formatDuration(totalSeconds(timeline))}</span>
          </span>
          <span />
        </div>
      </div>
    </div>
  );
}

function TimelineRow(props: { timeline: ITimeline; phase: ITimelinePhase }): JSX.Element {
  const { timeline, phase } = props;
  const { left, width } = barGeometry(timeline, phase);
  const classes = ['jp-NBValidation-bar'];
  if (phase.current) {
    classes.push('jp-mod-current');
  }
  if (phase.failed) {
    classes.push('jp-mod-failed');
  }
  if (phase.terminal) {
    classes.push('jp-mod-terminal');
  }
  const label = PHASE_LABELS[phase.phase] ?? phase.phase;
  const duration = phase.terminal
    ? phase.phase === 'Succeeded'
      ? '✓'
      : '✗'
    : formatDuration(phase.durationSeconds);
  const tip = [
    `${label}: ${phase.terminal ? 'at ' + formatClock(phase.start) : formatDuration(phase.durationSeconds)}`,
    phase.reason,
    phase.message
  ]
    .filter(Boolean)
    .join('\n');
  return (
    <li className="jp-NBValidation-row">
      <span className="jp-NBValidation-phaseLabel" title={tip}>
        {label}
      </span>
      <span className="jp-NBValidation-track" title={tip}>
        <span
          className={classes.join(' ')}
          data-phase={phase.phase}
          style={
            phase.terminal
              ? { left: `min(${left}%, calc(100% - 6px))`, width: '6px' }
              : { left: `${left}%`, width: `${width}%` }
          }
        />
      </span>
      <span className="jp-NBValidation-duration" title={tip}>
        {duration}
        {phase.current ? '…' : ''}
      </span>
    </li>
  );
}

function failingResult(job: IJob): ICellResult | null {
  const results = job.status?.results ?? [];
  const idx = job.status?.failedCellIndex;
  if (idx !== undefined && idx !== null) {
    return (
      results.find(r => r.cellIndex === idx) ?? {
        cellIndex: idx,
        status: 'Failure'
      }
    );
  }
  return results.find(r => r.status === 'Failure') ?? null;
}

function GotoButton(props: { job: IJob; index: number; actions: IPanelActions }): JSX.Element {
  const { job, index, actions } = props;
  return (
    <button
      type="button"
      className="jp-Button jp-mod-styled jp-NBValidation-goto"
      data-cell-index={index}
      onClick={() => void actions.gotoCell(jobNotebook(job), index)}
      title={`Open ${jobNotebook(job)} and select cell ${index}`}
    >
      Go to cell
    </button>
  );
}

function FailureDetails(props: { job: IJob; actions: IPanelActions }): JSX.Element | null {
  const { job, actions } = props;
  if (jobPhase(job) !== 'Failed') {
    return null;
  }
  const result = failingResult(job);
  if (!result) {
    return null;
  }
  const traceback = stripAnsi(result.output);
  return (
    <div className="jp-NBValidation-section jp-NBValidation-failure">
      <h3 className="jp-NBValidation-sectionTitle">Failing cell</h3>
      <div className="jp-NBValidation-failureHead">
        <span className="jp-NBValidation-cellIndex">cell {result.cellIndex}</span>
        <GotoButton job={job} index={result.cellIndex} actions={actions} />
      </div>
      {(result.errorName || result.errorMessage) && (
        <div className="jp-NBValidation-errorLine">
          {result.errorName && <strong>{result.errorName}</strong>}
          {result.errorName && result.errorMessage ? ': ' : ''}
          {stripAnsi(result.errorMessage)}
        </div>
      )}
      {traceback && <pre className="jp-NBValidation-traceback">{traceback}</pre>}
    </div>
  );
}

function Comparison(props: {
  comparison: IComparisonResult | undefined;
  job: IJob;
  actions: IPanelActions;
}): JSX.Element | null {
  const { comparison, job, actions } = props;
  if (!comparison) {
    return null;
  }
  const diffs = comparison.diffs ?? [];
  const matched = comparison.result === 'matched';
  return (
    <div className="jp-NBValidation-section jp-NBValidation-comparison">
      <h3 className="jp-NBValidation-sectionTitle">Golden comparison</h3>
      <div
        className={`jp-NBValidation-comparisonResult${matched ? '' : ' jp-mod-failed'}`}
        data-result={comparison.result ?? ''}
      >
        {matched ? '✓ matched' : '✗ differs'}
        {comparison.totalCells !== undefined &&
          ` — ${comparison.matchedCells ?? 0}/${comparison.totalCells} cells matched`}
        {comparison.strategy && ` (${comparison.strategy})`}
      </div>
      {diffs.map((d, i) => (
        <div className="jp-NBValidation-diff" key={`${d.cellIndex}-${i}`} data-severity={d.severity ?? ''}>
          <div className="jp-NBValidation-diffHead">
            <span>
              cell {d.cellIndex}
              {d.diffType ? ` — ${d.diffType}` : ''}
              {d.severity ? ` (${d.severity})` : ''}
            </span>
            <GotoButton job={job} index={d.cellIndex} actions={actions} />
          </div>
          <div className="jp-NBValidation-diffColumns">
            <div>
              <div className="jp-NBValidation-diffLabel">Expected (golden)</div>
              <pre className="jp-NBValidation-expected">{stripAnsi(d.expected) || '∅'}</pre>
            </div>
            <div>
              <div className="jp-NBValidation-diffLabel">Actual</div>
              <pre className="jp-NBValidation-actual">{stripAnsi(d.actual) || '∅'}</pre>
            </div>
          </div>
          {d.diff && (
            <details>
              <summary>Unified diff</summary>
              <pre className="jp-NBValidation-unified">{stripAnsi(d.diff)}</pre>
            </details>
          )}
        </div>
      ))}
    </div>
  );
}

function CellSummary(props: { results: ICellResult[] | undefined }): JSX.Element | null {
  const results = props.results ?? [];
  if (!results.length) {
    return null;
  }
  const count = (s: string) => results.filter(r => r.status === s).length;
  return (
    <div className="jp-NBValidation-cells">
      Cells: {count('Success')} passed, {count('Failure')} failed, {count('Skipped')} skipped
    </div>
  );
}

function Links(props: { model: ValidationModel; job: IJob }): JSX.Element | null {
  const { model, job } = props;
  const name = job.metadata.name;
  const status = job.status ?? {};
  const hasBuild = !!status.buildStatus;
  const hasNotebook = isTerminal(status.phase) && (status.results?.length ?? 0) > 0;
  if (!hasBuild && !hasNotebook) {
    return null;
  }
  return (
    <div className="jp-NBValidation-links">
      {hasBuild && (
        <a
          className="jp-NBValidation-link"
          href={model.api.buildLogUrl(name)}
          target="_blank"
          rel="noopener noreferrer"
        >
          Build log
        </a>
      )}
      {hasNotebook && (
        <a
          className="jp-NBValidation-link"
          href={model.api.executedNotebookUrl(name)}
          target="_blank"
          rel="noopener noreferrer"
        >
          Executed notebook (JSON)
        </a>
      )}
    </div>
  );
}

function EventsList(props: { events: IJobEvent[] | undefined }): JSX.Element | null {
  const events = props.events ?? [];
  if (!events.length) {
    return null;
  }
  return (
    <div className="jp-NBValidation-section">
      <h3 className="jp-NBValidation-sectionTitle">Events</h3>
      <ol className="jp-NBValidation-events" aria-label="Events">
        {events.map((e, i) => (
          <li
            key={e.metadata?.name ?? `${e.reason}-${i}`}
            className={`jp-NBValidation-event${e.type === 'Warning' ? ' jp-mod-warning' : ''}`}
            data-reason={e.reason}
          >
            <div className="jp-NBValidation-eventHead">
              <time dateTime={e.eventTime}>{formatClock(parseTime(e.eventTime))}</time>
              <span className="jp-NBValidation-eventType">
                {e.type === 'Warning' ? '⚠ Warning' : e.type ?? ''}
              </span>
              <span className="jp-NBValidation-eventReason">{e.reason}</span>
            </div>
            {e.note && <div className="jp-NBValidation-eventNote">{e.note}</div>}
          </li>
        ))}
      </ol>
    </div>
  );
}
