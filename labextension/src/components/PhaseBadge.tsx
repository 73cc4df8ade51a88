import * as React from 'react';
import { PHASE_LABELS } from '../phases';

export function PhaseBadge(props: { phase: string }): JSX.Element {
  const phase = props.phase || 'Pending';
  return (
    <span className="jp-NBValidation-badge" data-phase={phase}>
      {PHASE_LABELS[phase] ?? phase}
    </span>
  );
}
