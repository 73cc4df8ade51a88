/**
 * The one timeline rule: the vectors in tests/vectors/timeline (events +
 * status + now in, the server's /timeline document out) give the same phases
 * here as in jupyter_nbvalidation/core/timeline.py (tests/test_timeline.py).
 * JavaScript times have millisecond precision, the server's microsecond.
 */
import * as fs from 'fs';
import * as path from 'path';
import { parseTime } from '../src/format';
import { computeTimeline } from '../src/timeline';
import type { IJob, IJobEvent } from '../src/types';

interface IVector {
  description: string;
  now: string;
  job: IJob;
  events: IJobEvent[];
  expected: {
    source: string;
    phases: Array<{
      phase: string;
      reason: string;
      message: string;
      type: string;
      start: string;
      end: string | null;
      durationSeconds: number;
      current: boolean;
    }>;
  };
}

const DIR = path.resolve(__dirname, '..', '..', 'tests', 'vectors', 'timeline');
const VECTORS = fs
  .readdirSync(DIR)
  .filter(f => f.endsWith('.json'))
  .sort()
  .map(f => [f, JSON.parse(fs.readFileSync(path.join(DIR, f), 'utf-8')) as IVector] as const);

describe('timeline vectors shared with the server', () => {
  it('has vectors', () => {
    expect(VECTORS.length).toBeGreaterThanOrEqual(10);
  });

  it.each(VECTORS)('%s', (_, v) => {
    const tl = computeTimeline(v.events, v.job, parseTime(v.now) as number);
    expect(tl.source).toBe(v.expected.source);
    expect(
      tl.phases.map(p => ({
        phase: p.phase,
        reason: p.reason,
        message: p.message,
        type: p.type,
        start: p.start,
        end: p.end,
        current: p.current
      }))
    ).toEqual(
      v.expected.phases.map(p => ({
        phase: p.phase,
        reason: p.reason,
        message: p.message,
        type: p.type,
        start: parseTime(p.start),
        end: p.end === null ? null : parseTime(p.end),
        current: p.current
      }))
    );
    tl.phases.forEach((p, i) => {
      expect(p.durationSeconds).toBeCloseTo(v.expected.phases[i].durationSeconds, 3);
    });
    expect(tl.terminal).toBe(
      v.expected.phases.some(p => ['Succeeded', 'Failed'].includes(p.phase))
    );
  });
});
