import * as React from 'react';
import { formatClock, formatDuration } from '../format';
import { PHASE_LABELS } from '../phases';
import { ITimeline, ITimelinePhase, barGeometry } from '../timeline';
import { plainMessage } from '../words';

export function TimelineRow(props: {
  timeline: ITimeline;
  phase: ITimelinePhase;
  cancelled?: boolean;
}): JSX.Element {
  const { timeline, phase, cancelled } = props;
  const { left, width } = barGeometry(timeline, phase);
  const classes = ['jp-NBValidation-bar'];
  if (phase.current) {
    classes.push('jp-mod-current');
  }
  if (phase.failed) {
    // a cancel ends Failed too, but is shown as cancelled (its own colour)
    classes.push(cancelled ? 'jp-mod-cancelled' : 'jp-mod-failed');
  }
  if (phase.terminal) {
    classes.push('jp-mod-terminal');
  }
  const label =
    cancelled && phase.phase === 'Failed'
      ? 'Cancelled'
      : (PHASE_LABELS[phase.phase] ?? phase.phase);
  const duration = phase.terminal
    ? phase.phase === 'Succeeded'
      ? '✓'
      : cancelled
        ? '⊘'
        : '✗'
    : formatDuration(phase.durationSeconds);
  const tip = [
    `${label}: ${phase.terminal ? 'at ' + formatClock(phase.start) : formatDuration(phase.durationSeconds)}`,
    plainMessage(phase.message)
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
