import { canFindCause, causeView } from '../src/cause';
import type { IBisection, IChanges } from '../src/types';
import { job } from './fixtures';

const since: IChanges = {
  since: { name: 'nb-1' },
  sentence: 'nbvdrifta 1.0 → 2.0; no cell changed'
};

describe('Find the cause', () => {
  it('is offered on a failed job whose notebook passed before, only', () => {
    const failed = job('nb-2', 'nb.ipynb', 'Failed', 0);
    expect(canFindCause(failed, since)).toBe(true);
    expect(canFindCause(failed, { since: null, sentence: 'no earlier success' })).toBe(false);
    expect(canFindCause(failed, null)).toBe(false);
    expect(canFindCause(job('nb-3', 'nb.ipynb', 'Succeeded', 0), since)).toBe(false);
    for (const reason of ['Cancelled', 'InfrastructureFailed']) {
      const j = job('nb-4', 'nb.ipynb', 'Failed', 0);
      j.status = { ...j.status, reason };
      expect(canFindCause(j, since)).toBe(false);
    }
  });

  it('shows the steps as they end and the conclusion', () => {
    const doc: IBisection = {
      job: 'nb-2',
      state: 'running',
      maxSteps: 12,
      lines: [],
      steps: [
        {
          job: 'p-1',
          outcome: 'pass',
          text: 'step 1/12: the last success’s pins → Succeeded (job p-1)'
        }
      ],
      result: null
    };
    expect(causeView(doc)).toEqual({
      running: true,
      steps: ['step 1/12: the last success’s pins → Succeeded (job p-1)'],
      conclusion: null,
      found: false
    });
    const done = causeView({
      ...doc,
      state: 'finished',
      steps: [...doc.steps, { job: 'p-2', outcome: 'fail' }],
      result: { result: 'found', message: 'nbvdrifta 1.0 → 2.0 turns it red (2 validations, 9 s)' }
    });
    expect(done?.steps[1]).toBe('step 2/12: fail (job p-2)');
    expect(done?.conclusion).toBe('nbvdrifta 1.0 → 2.0 turns it red (2 validations, 9 s)');
    expect(done?.found).toBe(true);
    const stopped = causeView({
      ...doc,
      state: 'stopped',
      result: { result: 'stopped', message: 'stopped (step job p-1 cancelled)' }
    });
    expect(stopped?.conclusion).toBe('Stopped: stopped (step job p-1 cancelled)');
    expect(causeView(null)).toBeNull();
  });
});
