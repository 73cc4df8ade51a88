import { barGeometry, computeTimeline, entriesFromEvents, totalSeconds } from '../src/timeline';
import { FULL_SUCCESS_EVENTS, T0, at, ev, job, tr } from './fixtures';

describe('computeTimeline from events', () => {
  it('builds one phase per transition in order with durations', () => {
    const tl = computeTimeline(FULL_SUCCESS_EVENTS, null, T0 + 100_000);
    expect(tl.source).toBe('events');
    expect(tl.phases.map(p => p.phase)).toEqual([
      'Initializing',
      'Building',
      'BuildComplete',
      'ValidationRunning',
      'Succeeded'
    ]);
    expect(tl.phases.map(p => p.durationSeconds)).toEqual([1, 30, 0.5, 8.5, 0]);
    expect(tl.terminal).toBe(true);
    expect(tl.verdict).toBe('Succeeded');
    expect(tl.phases.some(p => p.current)).toBe(false);
    expect(tl.phases.some(p => p.failed)).toBe(false);
    // the axis ends at the verdict, not at "now"
    expect(totalSeconds(tl)).toBe(40);
    expect(tl.phases[1]).toMatchObject({
      reason: 'BuildStarted',
      message: 'BuildStarted note',
      type: 'Normal'
    });
  });

  it('sorts events by time and ignores unknown reasons and StatusUpdateFailed warnings', () => {
    const events = [
      ev('ValidationStarted', 5),
      ev('Accepted', 0),
      ev('SomethingElse', 2),
      ev('ValidationSucceededStatusUpdateFailed', 6, { type: 'Warning' }),
      ev('BuildStarted', 1),
      ev('BuildSucceeded', 4)
    ];
    const tl = computeTimeline(events, null, T0 + 7000);
    expect(tl.phases.map(p => p.phase)).toEqual([
      'Initializing',
      'Building',
      'BuildComplete',
      'ValidationRunning'
    ]);
    expect(tl.terminal).toBe(false);
    expect(tl.currentPhase).toBe('ValidationRunning');
  });

  it('keeps the earliest event of each phase', () => {
    const events = [
      ev('Accepted', 0.5),
      ev('Accepted', 0),
      ev('ValidationStarted', 1),
      ev('ValidationFailed', 2)
    ];
    const entries = entriesFromEvents(events);
    expect(entries.map(e => [e.phase, e.time - T0])).toEqual([
      ['Initializing', 0],
      ['ValidationRunning', 1000],
      ['Failed', 2000]
    ]);
  });

  it("knows only the server's transition reasons", () => {
    const entries = entriesFromEvents([
      ev('Submitted', 0),
      ev('Succeeded', 1),
      ev('constructor', 2),
      ev('Cancelled', 3)
    ]);
    expect(entries.map(e => [e.phase, e.reason])).toEqual([['Failed', 'Cancelled']]);
  });
});

describe('the current phase grows with now', () => {
  const events = [ev('Accepted', 0), ev('BuildStarted', 2)];

  it.each([
    [2, 0],
    [3, 1],
    [12.5, 10.5],
    [62, 60]
  ])('at t=%ss the Building bar lasts %ss', (t, expected) => {
    const tl = computeTimeline(events, null, T0 + t * 1000);
    const building = tl.phases[1];
    expect(building.current).toBe(true);
    expect(building.end).toBeNull();
    expect(building.durationSeconds).toBeCloseTo(expected, 6);
    expect(tl.phases[0].durationSeconds).toBe(2);
    expect(tl.axisEnd).toBe(T0 + t * 1000);
  });

  it('never goes negative when the browser clock is behind the server', () => {
    const tl = computeTimeline(events, null, T0 + 1000);
    expect(tl.phases[1].durationSeconds).toBe(0);
    const g = barGeometry(tl, tl.phases[1]);
    expect(g.width).toBeGreaterThanOrEqual(0);
    expect(g.left + g.width).toBeLessThanOrEqual(100);
  });

  it('bars share one axis: geometry grows with now', () => {
    const early = computeTimeline(events, null, T0 + 4000);
    const late = computeTimeline(events, null, T0 + 22_000);
    const e = barGeometry(early, early.phases[1]);
    const l = barGeometry(late, late.phases[1]);
    expect(e).toEqual({ left: 50, width: 50 });
    expect(l.left).toBeCloseTo((2 / 22) * 100, 6);
    expect(l.left + l.width).toBeCloseTo(100, 6);
  });
});

describe('failures', () => {
  it('marks the phase that failed and the Failed phase', () => {
    const events = [
      ev('Accepted', 0),
      ev('BuildStarted', 1),
      ev('BuildSucceeded', 5),
      ev('ValidationStarted', 5),
      ev('ValidationFailed', 9)
    ];
    const tl = computeTimeline(events, null, T0 + 60_000);
    expect(tl.verdict).toBe('Failed');
    expect(tl.phases.map(p => [p.phase, p.failed])).toEqual([
      ['Initializing', false],
      ['Building', false],
      ['BuildComplete', false],
      ['ValidationRunning', true],
      ['Failed', true]
    ]);
    expect(tl.phases[4].type).toBe('Warning');
    expect(tl.phases[3].durationSeconds).toBe(4);
  });

  it('a build failure marks Building', () => {
    const tl = computeTimeline(
      [ev('Accepted', 0), ev('BuildStarted', 1), ev('BuildFailed', 3)],
      null,
      T0 + 10_000
    );
    expect(tl.phases.map(p => p.phase)).toEqual(['Initializing', 'Building', 'Failed']);
    expect(tl.phases[1].failed).toBe(true);
    expect(tl.phases[0].failed).toBe(false);
  });
});

describe('build disabled', () => {
  it('goes Initializing → ValidationRunning → Succeeded without build phases', () => {
    const tl = computeTimeline(
      [ev('Accepted', 0), ev('ValidationStarted', 0.25), ev('ValidationSucceeded', 3)],
      null,
      T0 + 10_000
    );
    expect(tl.phases.map(p => p.phase)).toEqual(['Initializing', 'ValidationRunning', 'Succeeded']);
    expect(tl.phases.map(p => p.durationSeconds)).toEqual([0.25, 2.75, 0]);
  });
});

describe('fallback to status.transitions', () => {
  const transitions = [
    tr('Initializing', 0, 'Accepted'),
    tr('Building', 1, 'BuildStarted'),
    tr('BuildComplete', 20, 'BuildSucceeded'),
    tr('ValidationRunning', 20.5, 'ValidationStarted'),
    tr('Succeeded', 25, 'ValidationSucceeded')
  ];
  const j = job('nb-1', 'nb.ipynb', 'Succeeded', 0, transitions);

  it('uses transitions when the events have expired', () => {
    const tl = computeTimeline([], j, T0 + 99_000);
    expect(tl.source).toBe('transitions');
    expect(tl.phases.map(p => p.phase)).toEqual(transitions.map(t => t.phase));
    expect(tl.phases[1].durationSeconds).toBe(19);
    expect(tl.phases[1].reason).toBe('BuildStarted');
    expect(tl.verdict).toBe('Succeeded');
  });

  it('uses transitions when only some events are left', () => {
    const tl = computeTimeline(
      [ev('ValidationStarted', 20.5), ev('ValidationSucceeded', 25)],
      j,
      T0 + 99_000
    );
    expect(tl.source).toBe('transitions');
    expect(tl.phases).toHaveLength(5);
  });

  it('prefers events when they cover the history', () => {
    const tl = computeTimeline(FULL_SUCCESS_EVENTS, j, T0 + 99_000);
    expect(tl.source).toBe('events');
    expect(tl.phases[1].message).toBe('BuildStarted note');
  });

  it('has no phases without any history (the status phase alone is no timeline)', () => {
    const bare = job('nb-2', 'nb.ipynb', 'Initializing', 3);
    const tl = computeTimeline(undefined, bare, T0 + 5000);
    expect(tl).toMatchObject({ source: 'events', phases: [], terminal: false, verdict: null });
  });

  it('is empty with nothing at all', () => {
    const tl = computeTimeline(null, null, T0);
    expect(tl).toMatchObject({ source: 'events', phases: [], terminal: false, verdict: null });
  });

  it('reads microsecond times', () => {
    const tl = computeTimeline(
      [],
      job('x', 'a.ipynb', 'Building', 0, [tr('Initializing', 0), tr('Building', 0.001)]),
      T0 + 1
    );
    expect(tl.phases[0].durationSeconds).toBeCloseTo(0.001, 6);
    expect(at(0)).toBe('2026-11-29T15:00:00.000456Z');
  });
});
