import * as React from 'react';
import { basename, formatAgo, parseTime } from '../format';
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
                {showNotebook ? (
                  <>
                    {basename(jobNotebook(job))}
                    <span className="jp-NBValidation-jobSub">{name}</span>
                  </>
                ) : (
                  name
                )}
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
