import * as React from 'react';
import { basename, parseTime } from '../format';
import { agoWords } from '../words';
import type { ValidationModel } from '../model';
import { jobNotebook } from '../state';
import type { IJob } from '../types';
import { PhaseBadge } from './PhaseBadge';

export function JobList(props: {
  model: ValidationModel;
  jobs: IJob[];
  now: number;
}): JSX.Element | null {
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
              <PhaseBadge job={job} />
              <span className="jp-NBValidation-jobName" title={name}>
                {showNotebook && (
                  <span className="jp-NBValidation-jobNotebook">
                    {basename(jobNotebook(job))} ·{' '}
                  </span>
                )}
                <span className="jp-NBValidation-jobAge">{ago(job, now)}</span>
              </span>
            </button>
          </li>
        );
      })}
    </ul>
  );
}

/** "2 min ago" (when the job was created), "just now". */
function ago(job: IJob, now: number): string {
  const t = parseTime(job.metadata.creationTimestamp);
  return t === null ? '' : agoWords(t, now);
}
