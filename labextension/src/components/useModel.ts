import * as React from 'react';
import type { ValidationModel } from '../model';

/**
 * Re-render on model changes; returns the model's clock (it ticks every second while a shown
 * job runs: the panel and the status bar read the same `now`).
 */
export function useModel(model: ValidationModel): number {
  const [, setVersion] = React.useState(0);
  React.useEffect(() => {
    const onChange = () => setVersion(v => v + 1);
    model.changed.connect(onChange);
    return () => {
      model.changed.disconnect(onChange);
    };
  }, [model]);
  return model.now;
}
