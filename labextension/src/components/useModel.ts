import * as React from 'react';
import type { ValidationModel } from '../model';
import { isTerminal } from '../phases';
import { jobPhase } from '../state';

/** Re-render on model changes; tick every second while the job runs. */
export function useModel(model: ValidationModel): number {
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
