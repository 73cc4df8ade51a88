import * as React from 'react';
import { formatClock, formatDuration } from '../format';
import { ITimeline, shownPhases, totalSeconds } from '../timeline';
import { TimelineRow } from './TimelineRow';

export function Timeline(props: { timeline: ITimeline; cancelled?: boolean }): JSX.Element {
  const { timeline, cancelled } = props;
  if (!timeline.phases.length) {
    return <div className="jp-NBValidation-timeline jp-mod-empty">No phases recorded yet.</div>;
  }
  return (
    <div className="jp-NBValidation-section">
      <h3 className="jp-NBValidation-sectionTitle">
        Timeline
        <span className="jp-NBValidation-source" title="Where the timeline comes from">
          {timeline.source === 'events' ? 'from events' : 'from the job’s status'}
        </span>
      </h3>
      <div className="jp-NBValidation-timelineGrid">
        <ol className="jp-NBValidation-timeline" aria-label="Phase timeline">
          {shownPhases(timeline).map(p => (
            <TimelineRow key={p.phase} timeline={timeline} phase={p} cancelled={cancelled} />
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
