import * as React from 'react';
import { formatClock, parseTime } from '../format';
import type { IJobEvent } from '../types';
import { eventWords, plainMessage } from '../words';

/**
 * The job's events, in words (the reason code stays in data-reason), collapsed on a finished
 * job (`open`: while it runs).
 */
export function EventsList(props: {
  events: IJobEvent[] | undefined;
  open?: boolean;
}): JSX.Element | null {
  const events = props.events ?? [];
  const [open, setOpen] = React.useState<boolean | null>(null);
  if (!events.length) {
    return null;
  }
  return (
    <details
      className="jp-NBValidation-section jp-NBValidation-eventsSection"
      open={open ?? !!props.open}
      onToggle={e => {
        // only the reader's own toggles are kept (not the automatic ones)
        const now = (e.currentTarget as HTMLDetailsElement).open;
        if (now !== (open ?? !!props.open)) {
          setOpen(now);
        }
      }}
    >
      <summary className="jp-NBValidation-sectionTitle">
        <span>Events</span>
        <span className="jp-NBValidation-source">{events.length}</span>
      </summary>
      <ol className="jp-NBValidation-events" aria-label="Events">
        {events.map((e, i) => (
          <li
            key={e.metadata?.name ?? `${e.reason}-${i}`}
            className={`jp-NBValidation-event${e.type === 'Warning' ? ' jp-mod-warning' : ''}`}
            data-reason={e.reason}
          >
            <div className="jp-NBValidation-eventHead">
              <time dateTime={e.eventTime}>{formatClock(parseTime(e.eventTime))}</time>
              <span className="jp-NBValidation-eventType">{e.type === 'Warning' ? '⚠' : ''}</span>
              <span className="jp-NBValidation-eventReason">{eventWords(e.reason)}</span>
            </div>
            {e.note && <div className="jp-NBValidation-eventNote">{plainMessage(e.note)}</div>}
          </li>
        ))}
      </ol>
    </details>
  );
}
