import * as React from 'react';
import { formatClock, parseTime } from '../format';
import type { IJobEvent } from '../types';

export function EventsList(props: { events: IJobEvent[] | undefined }): JSX.Element | null {
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
                {e.type === 'Warning' ? '⚠ Warning' : (e.type ?? '')}
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
