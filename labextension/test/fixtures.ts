import type { IJob, IJobEvent, ITransition } from '../src/types';

export const T0 = Date.parse('2026-11-29T15:00:00.000Z');

/** An RFC 3339 time `sec` seconds after T0, with microseconds like the server. */
export function at(sec: number): string {
  return new Date(T0 + sec * 1000).toISOString().replace('Z', '456Z');
}

export function ev(reason: string, sec: number, extra: Partial<IJobEvent> = {}): IJobEvent {
  return {
    metadata: { name: `${reason}-${sec}` },
    reason,
    type: /Failed|TimedOut|Cancelled/.test(reason) ? 'Warning' : 'Normal',
    note: `${reason} note`,
    action: 'Test',
    eventTime: at(sec),
    regarding: { name: 'nb-1', uid: 'u1', kind: 'NotebookValidationJob' },
    ...extra
  };
}

export function tr(phase: string, sec: number, reason = `${phase}Reason`): ITransition {
  return { phase, reason, message: `${phase} message`, time: at(sec) };
}

export function job(
  name: string,
  notebook: string,
  phase: string,
  created: number,
  transitions: ITransition[] = []
): IJob {
  return {
    apiVersion: 'nbvalidation.dev/v1alpha1',
    kind: 'NotebookValidationJob',
    metadata: { name, uid: `uid-${name}`, creationTimestamp: at(created) },
    spec: { notebook: { path: notebook } },
    status: { phase, transitions }
  };
}

export const FULL_SUCCESS_EVENTS: IJobEvent[] = [
  ev('Accepted', 0),
  ev('BuildStarted', 1),
  ev('BuildSucceeded', 31),
  ev('ValidationStarted', 31.5),
  ev('ValidationSucceeded', 40)
];
