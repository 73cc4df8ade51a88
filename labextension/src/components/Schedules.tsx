import * as React from 'react';
import type { PanelView, SchedulesModel } from '../schedules';
import { nextRunWords, scheduleMessage, scheduleState, stripMarks } from '../strip';
import type { ISchedule } from '../types';
import { plainMessage } from '../words';

/** Re-render on the schedules model's changes (none without one). */
export function useSchedules(model: SchedulesModel | undefined): void {
  const [, setVersion] = React.useState(0);
  React.useEffect(() => {
    if (!model) {
      return;
    }
    const onChange = () => setVersion(v => v + 1);
    model.changed.connect(onChange);
    return () => {
      model.changed.disconnect(onChange);
    };
  }, [model]);
}

const VIEWS: Array<{ view: PanelView; label: string }> = [
  { view: 'jobs', label: 'Jobs' },
  { view: 'schedules', label: 'Schedules' }
];

export const viewTabId = (view: PanelView): string => `jp-NBValidation-tab-${view}`;
export const viewPanelId = (view: PanelView): string => `jp-NBValidation-tabpanel-${view}`;

/** Jobs | Schedules: a tab list (arrow keys move between the tabs, as ARIA's tabs do). */
export function ViewTabs(props: { model: SchedulesModel }): JSX.Element {
  const { model } = props;
  useSchedules(model);
  const refs = React.useRef<Array<HTMLButtonElement | null>>([]);
  const onKeyDown = (e: React.KeyboardEvent, i: number) => {
    let next = -1;
    if (e.key === 'ArrowRight' || e.key === 'ArrowDown') {
      next = (i + 1) % VIEWS.length;
    } else if (e.key === 'ArrowLeft' || e.key === 'ArrowUp') {
      next = (i + VIEWS.length - 1) % VIEWS.length;
    } else if (e.key === 'Home') {
      next = 0;
    } else if (e.key === 'End') {
      next = VIEWS.length - 1;
    }
    if (next >= 0) {
      e.preventDefault();
      model.setView(VIEWS[next].view);
      refs.current[next]?.focus();
    }
  };
  return (
    <div className="jp-NBValidation-tabs" role="tablist" aria-label="Jobs or schedules">
      {VIEWS.map(({ view, label }, i) => {
        const selected = model.view === view;
        return (
          <button
            key={view}
            ref={el => {
              refs.current[i] = el;
            }}
            type="button"
            role="tab"
            id={viewTabId(view)}
            aria-selected={selected}
            aria-controls={viewPanelId(view)}
            tabIndex={selected ? 0 : -1}
            className={`jp-NBValidation-tab${selected ? ' jp-mod-active' : ''}`}
            data-view={view}
            onClick={() => model.setView(view)}
            onKeyDown={e => onKeyDown(e, i)}
          >
            {label}
          </button>
        );
      })}
    </div>
  );
}

/** The Schedules tab: the user's schedules, each with its strip of last verdicts. */
export function SchedulesView(props: { model: SchedulesModel }): JSX.Element {
  const { model } = props;
  useSchedules(model);
  let body: JSX.Element;
  if (model.unsupported) {
    body = (
      <div className="jp-NBValidation-empty" role="status">
        This server keeps no schedules: they are not available on its backend yet.
      </div>
    );
  } else if (!model.loaded) {
    body = <div className="jp-NBValidation-empty">Loading schedules…</div>;
  } else if (!model.schedules.length) {
    body = (
      <div className="jp-NBValidation-empty jp-NBValidation-schedulesEmpty">
        No schedules yet: create one in a terminal with{' '}
        <code>jupyter nbvalidation schedule create NAME NOTEBOOK --cron &quot;0 3 * * *&quot;</code>{' '}
        (see “Watching a repository” in the documentation).
      </div>
    );
  } else {
    body = (
      <ul className="jp-NBValidation-schedules" aria-label="Schedules">
        {model.schedules.map(s => (
          <ScheduleRow key={s.metadata.name} model={model} schedule={s} />
        ))}
      </ul>
    );
  }
  return (
    <div
      className="jp-NBValidation-schedulesView"
      role="tabpanel"
      id={viewPanelId('schedules')}
      aria-labelledby={viewTabId('schedules')}
    >
      {model.error && (
        <div className="jp-NBValidation-error" role="alert">
          {model.error}
        </div>
      )}
      {body}
    </div>
  );
}

function ScheduleRow(props: { model: SchedulesModel; schedule: ISchedule }): JSX.Element {
  const { model, schedule } = props;
  const name = schedule.metadata.name;
  const state = scheduleState(schedule);
  const marks = stripMarks(schedule);
  const next = nextRunWords(schedule);
  const note = model.note(name);
  const busy = model.busy(name);
  const paused = schedule.spec.suspend;
  const message = scheduleMessage(schedule);
  return (
    <li className="jp-NBValidation-schedule" data-schedule={name} data-state={state}>
      <div className="jp-NBValidation-scheduleHead">
        <span className="jp-NBValidation-scheduleName">{name}</span>
        <span className="jp-NBValidation-scheduleState" data-state={state}>
          {state}
        </span>
      </div>
      <div className="jp-NBValidation-scheduleMeta">
        <code className="jp-NBValidation-cron" title="cron expression, in UTC">
          {schedule.spec.schedule}
        </code>
        {next && <span className="jp-NBValidation-nextRun"> · {next}</span>}
      </div>
      {marks.length ? (
        <ol
          className="jp-NBValidation-strip"
          aria-label={`Last ${marks.length} runs of ${name}, oldest first`}
        >
          {marks.map(m => (
            <li key={m.job}>
              <button
                type="button"
                className="jp-NBValidation-mark"
                data-job={m.job}
                data-verdict={m.kind}
                title={m.title}
                aria-label={`Open the run: ${m.label}`}
                onClick={() => void model.openRun(name, m.job)}
              >
                {m.symbol}
              </button>
            </li>
          ))}
        </ol>
      ) : (
        <div className="jp-NBValidation-scheduleMeta">No runs yet.</div>
      )}
      <div className="jp-NBValidation-scheduleActions">
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-NBValidation-pause"
          disabled={busy}
          onClick={() => void model.setSuspend(name, !paused)}
          aria-label={`${paused ? 'Resume' : 'Pause'} ${name}`}
        >
          {paused ? 'Resume' : 'Pause'}
        </button>
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-NBValidation-runNow"
          disabled={busy}
          onClick={() => void model.runNow(name)}
          aria-label={`Run ${name} now`}
        >
          Run now
        </button>
      </div>
      {note && (
        <div className="jp-NBValidation-scheduleNote" role="status">
          {note}
        </div>
      )}
      {message && <div className="jp-NBValidation-scheduleMeta">{plainMessage(message)}</div>}
    </li>
  );
}
