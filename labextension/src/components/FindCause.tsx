import { Notification } from '@jupyterlab/apputils';
import * as React from 'react';
import { canFindCause, causeView } from '../cause';
import { describe } from '../model';
import type { IBisection, IChanges, IJob, IValidationAPI } from '../types';

const POLL_MS = 1500;

/**
 * Find the cause: on a failed job whose notebook passed before, the server searches which
 * package changes since then turned it red (each step a validation of its own), shown
 * step by step; it can be stopped.
 */
export function FindCause(props: {
  api: IValidationAPI;
  job: IJob;
  changes: IChanges | null;
}): JSX.Element | null {
  const { api, job, changes } = props;
  const name = job.metadata.name;
  const able = canFindCause(job, changes) && !!api.bisection && !!api.startBisection;
  const [doc, setDoc] = React.useState<IBisection | null>(null);
  const running = doc?.state === 'running';
  React.useEffect(() => {
    // the panel keys a job's detail by its name: this state is this job's
    if (!able || !api.bisection) {
      return;
    }
    let live = true;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const poll = async (): Promise<void> => {
      try {
        const got = await api.bisection!(name);
        if (!live) {
          return;
        }
        setDoc(got);
        if (got?.state === 'running') {
          timer = setTimeout(() => void poll(), POLL_MS);
        }
      } catch {
        if (live) {
          timer = setTimeout(() => void poll(), POLL_MS * 4);
        }
      }
    };
    void poll();
    return () => {
      live = false;
      if (timer !== null) {
        clearTimeout(timer);
      }
    };
    // running: a search started here is followed until it ends
  }, [api, name, able, running]);
  if (!able) {
    return null;
  }
  const view = causeView(doc);
  const start = async (): Promise<void> => {
    try {
      setDoc(await api.startBisection!(name));
    } catch (e) {
      Notification.error(`Cannot search for the cause: ${describe(e)}`, { autoClose: 8000 });
    }
  };
  const stop = async (): Promise<void> => {
    try {
      setDoc(await api.stopBisection!(name));
    } catch (e) {
      Notification.error(`Cannot stop the search: ${describe(e)}`, { autoClose: 8000 });
    }
  };
  return (
    <div
      className="jp-NBValidation-cause"
      data-state={doc?.state ?? 'none'}
      data-found={view?.found ? 'true' : 'false'}
    >
      {!view?.running && (
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-NBValidation-findCause"
          onClick={() => void start()}
          title="Validate again with the last success's exact versions, then with the changed packages moved a few at a time, to name the change that turns it red (each step is a validation of its own)"
        >
          {view ? 'Find the cause again' : 'Find the cause'}
        </button>
      )}
      {view?.running && (
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-mod-warn jp-NBValidation-stopCause"
          onClick={() => void stop()}
        >
          Stop the search
        </button>
      )}
      {view && (
        <ol className="jp-NBValidation-causeSteps" aria-label="Steps of the search">
          {view.steps.map((line, i) => (
            <li key={i}>{line}</li>
          ))}
          {view.running && <li className="jp-NBValidation-causeRunning">validating…</li>}
        </ol>
      )}
      {view?.conclusion && (
        <div className="jp-NBValidation-causeResult" role="status">
          {view.conclusion}
        </div>
      )}
    </div>
  );
}
