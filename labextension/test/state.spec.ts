import {
  addSubmittedJob,
  anyRunning,
  applyLiveEvent,
  initialState,
  latestJobFor,
  mergeJobs,
  selectJob,
  selectedJob,
  setEvents,
  setNotebook,
  setScope,
  visibleJobs
} from '../src/state';
import { computeTimeline } from '../src/timeline';
import { T0, at, ev, job, tr } from './fixtures';

const a1 = job('a-1', 'dir/a.ipynb', 'Succeeded', 10);
const a2 = job('a-2', 'dir/a.ipynb', 'ValidationRunning', 20, [
  tr('Initializing', 20),
  tr('ValidationRunning', 21)
]);
const b1 = job('b-1', 'b.ipynb', 'Failed', 15);

function names(jobs: { metadata: { name: string } }[]): string[] {
  return jobs.map(j => j.metadata.name);
}

describe('jobs filtering by notebook', () => {
  it('shows only the active notebook in notebook scope, newest first', () => {
    let s = setNotebook(initialState(), 'dir/a.ipynb');
    s = mergeJobs(s, [a1, b1, a2], 'all');
    expect(names(s.jobs)).toEqual(['a-2', 'b-1', 'a-1']);
    expect(names(visibleJobs(s))).toEqual(['a-2', 'a-1']);
    s = setScope(s, 'all');
    expect(names(visibleJobs(s))).toEqual(['a-2', 'b-1', 'a-1']);
  });

  it('shows nothing in notebook scope without an active notebook', () => {
    const s = mergeJobs(initialState(), [a1, b1], 'all');
    expect(visibleJobs(s)).toEqual([]);
    expect(s.selected).toBeNull();
  });

  it('drops jobs that vanished from an authoritative list only for that notebook', () => {
    let s = mergeJobs(initialState('all'), [a1, a2, b1], 'all');
    s = mergeJobs(s, [a2], 'dir/a.ipynb');
    expect(names(s.jobs)).toEqual(['a-2', 'b-1']);
    s = mergeJobs(s, [], 'all');
    expect(s.jobs).toEqual([]);
  });

  it('latestJobFor gives the newest job of a notebook', () => {
    expect(latestJobFor([a1, a2, b1], 'dir/a.ipynb')?.metadata.name).toBe('a-2');
    expect(latestJobFor([a1, a2, b1], 'zzz.ipynb')).toBeNull();
    expect(latestJobFor([a1], null)).toBeNull();
    expect(anyRunning([a1, b1])).toBe(false);
    expect(anyRunning([a1, a2])).toBe(true);
  });
});

describe('selection', () => {
  it('selects the newest shown job by default and keeps a valid selection', () => {
    let s = setNotebook(initialState(), 'dir/a.ipynb');
    s = mergeJobs(s, [a1, a2], 'dir/a.ipynb');
    expect(s.selected).toBe('a-2');
    s = selectJob(s, 'a-1');
    expect(selectedJob(s)?.metadata.name).toBe('a-1');
    // a refresh that brings nothing new keeps the hand-picked job
    s = mergeJobs(s, [a1, a2], 'dir/a.ipynb');
    expect(s.selected).toBe('a-1');
  });

  it('follows the newest job of the notebook, whoever started it', () => {
    let s = setNotebook(initialState(), 'dir/a.ipynb');
    s = mergeJobs(s, [a1, a2], 'dir/a.ipynb');
    s = selectJob(s, 'a-1');
    // a job started by the magic, the CLI or another tab appears in the list: it is selected
    s = mergeJobs(s, [a1, a2, job('a-3', 'dir/a.ipynb', 'Initializing', 30)], 'dir/a.ipynb');
    expect(s.selected).toBe('a-3');
    expect(s.pinned).toBe(false);
    // a new job of another notebook does not take the selection
    s = mergeJobs(s, [job('b-9', 'b.ipynb', 'Initializing', 40)], null);
    expect(s.selected).toBe('a-3');
    // in "All notebooks" too, the current notebook's new job is followed
    s = setScope(s, 'all');
    s = selectJob(s, 'b-9');
    s = mergeJobs(s, [job('a-4', 'dir/a.ipynb', 'Initializing', 50)], null);
    expect(s.selected).toBe('a-4');
  });

  it('moves to the newest remaining job when the selected one disappears', () => {
    let s = setNotebook(initialState(), 'dir/a.ipynb');
    s = mergeJobs(s, [a1, a2], 'dir/a.ipynb');
    s = selectJob(s, 'a-1');
    s = mergeJobs(s, [a2], 'dir/a.ipynb');
    expect(s.selected).toBe('a-2');
  });

  it('follows the active notebook', () => {
    let s = mergeJobs(initialState(), [a1, a2, b1], 'all');
    s = setNotebook(s, 'b.ipynb');
    expect(s.selected).toBe('b-1');
    s = setNotebook(s, 'dir/a.ipynb');
    expect(s.selected).toBe('a-2');
    s = setNotebook(s, 'none.ipynb');
    expect(s.selected).toBeNull();
  });

  it('in all scope a pinned selection survives a notebook switch', () => {
    let s = mergeJobs(initialState('all'), [a1, a2, b1], 'all');
    s = selectJob(s, 'b-1');
    s = setNotebook(s, 'dir/a.ipynb');
    expect(s.selected).toBe('b-1');
  });

  it('selects a job just submitted', () => {
    let s = setNotebook(initialState(), 'dir/a.ipynb');
    s = mergeJobs(s, [a1], 'dir/a.ipynb');
    const fresh = job('a-9', 'dir/a.ipynb', '', 40);
    s = addSubmittedJob(s, fresh);
    expect(s.selected).toBe('a-9');
    expect(names(visibleJobs(s))).toEqual(['a-9', 'a-1']);
  });

  it('switching scope keeps a job that is still shown', () => {
    let s = mergeJobs(setNotebook(initialState('all'), 'dir/a.ipynb'), [a1, a2, b1], 'all');
    s = selectJob(s, 'b-1');
    s = setScope(s, 'notebook');
    expect(s.selected).toBe('a-2');
    s = selectJob(s, 'a-1');
    s = setScope(s, 'all');
    expect(s.selected).toBe('a-1');
  });
});

describe('merging a live event', () => {
  it('moves the known job forward and extends its timeline at once', () => {
    let s = setNotebook(initialState(), 'dir/a.ipynb');
    s = mergeJobs(s, [a1, a2], 'dir/a.ipynb');
    const r = applyLiveEvent(s, {
      name: 'a-2',
      notebook: 'dir/a.ipynb',
      phase: 'Failed',
      reason: 'ValidationFailed',
      message: 'cell 2 raised ZeroDivisionError',
      type: 'Warning',
      time: at(25)
    });
    expect(r.known).toBe(true);
    expect(r.relevant).toBe(true);
    const j = selectedJob(r.state)!;
    expect(j.status?.phase).toBe('Failed');
    expect(j.status?.reason).toBe('ValidationFailed');
    const tl = computeTimeline(r.state.events['a-2'], j, T0 + 99_000);
    expect(tl.phases.map(p => p.phase)).toEqual(['Initializing', 'ValidationRunning', 'Failed']);
    expect(tl.phases[1]).toMatchObject({ failed: true, durationSeconds: 4 });
    // the original state object is untouched
    expect(s.jobs.find(x => x.metadata.name === 'a-2')?.status?.phase).toBe('ValidationRunning');
  });

  it('takes a retry event for no transition', () => {
    const s = mergeJobs(initialState('all'), [a1, a2], 'all');
    const r = applyLiveEvent(s, {
      name: 'a-2',
      phase: 'ValidationRunning',
      reason: 'ValidationRetried',
      message: 'The kernel failed to start.',
      type: 'Warning',
      time: at(22)
    });
    expect(r).toMatchObject({ known: true, relevant: true });
    const j = r.state.jobs.find(x => x.metadata.name === 'a-2')!;
    expect(j.status?.reason).not.toBe('ValidationRetried');
    expect(j.status?.transitions).toHaveLength(2);
  });

  it('takes a notice (ImageReuseOff) for no transition and no status change', () => {
    const s = mergeJobs(initialState('all'), [a1, a2], 'all');
    const before = s.jobs.find(x => x.metadata.name === 'a-2')!;
    const r = applyLiveEvent(s, {
      name: 'a-2',
      phase: 'ValidationRunning',
      reason: 'ImageReuseOff',
      message: 'Image reuse and the verdict cache are off for this job: ...',
      type: 'Warning',
      time: at(22)
    });
    expect(r).toMatchObject({ known: true, relevant: true });
    const j = r.state.jobs.find(x => x.metadata.name === 'a-2')!;
    expect(j.status?.reason).toBe(before.status?.reason);
    expect(j.status?.message).toBe(before.status?.message);
    expect(j.status?.transitions).toHaveLength(2);
  });

  it('ignores a stale event for an earlier phase and never leaves a terminal phase', () => {
    let s = mergeJobs(initialState('all'), [a1, a2], 'all');
    let r = applyLiveEvent(s, { name: 'a-2', phase: 'Initializing', time: at(20) });
    expect(selectedJob(r.state)?.status?.phase).toBe('ValidationRunning');
    expect(selectedJob(r.state)?.status?.transitions).toHaveLength(2);
    s = selectJob(r.state, 'a-1');
    r = applyLiveEvent(s, { name: 'a-1', phase: 'ValidationRunning', time: at(50) });
    expect(selectedJob(r.state)?.status?.phase).toBe('Succeeded');
  });

  it('an unknown job is relevant only if it belongs to what is shown', () => {
    const s = mergeJobs(setNotebook(initialState(), 'dir/a.ipynb'), [a1], 'dir/a.ipynb');
    expect(
      applyLiveEvent(s, { name: 'new', notebook: 'dir/a.ipynb', phase: 'Initializing' })
    ).toMatchObject({
      known: false,
      relevant: true
    });
    expect(
      applyLiveEvent(s, { name: 'new', notebook: 'other.ipynb', phase: 'Initializing' })
    ).toMatchObject({
      known: false,
      relevant: false
    });
    expect(
      applyLiveEvent(setScope(s, 'all'), { name: 'new', notebook: 'other.ipynb' }).relevant
    ).toBe(true);
  });

  it('a stale list fetched before the live event does not move the job back', () => {
    let s = mergeJobs(initialState('all'), [a2], 'all');
    s = applyLiveEvent(s, {
      name: 'a-2',
      phase: 'Succeeded',
      reason: 'ValidationSucceeded',
      time: at(30)
    }).state;
    s = mergeJobs(s, [a2], 'all');
    expect(selectedJob(s)?.status?.phase).toBe('Succeeded');
  });

  it('setEvents keeps events in time order and drops them with their job', () => {
    let s = mergeJobs(initialState('all'), [a1, a2], 'all');
    s = setEvents(s, 'a-2', [ev('ValidationStarted', 21), ev('Accepted', 20)]);
    expect(s.events['a-2'].map(e => e.reason)).toEqual(['Accepted', 'ValidationStarted']);
    s = mergeJobs(s, [a1], 'all');
    expect(s.events['a-2']).toBeUndefined();
  });
});

describe('list summaries (GET /jobs) and whole jobs (GET /jobs/{name})', () => {
  const whole = {
    ...b1,
    metadata: { ...b1.metadata, resourceVersion: '7' },
    status: {
      ...b1.status,
      results: [{ cellIndex: 0, status: 'Failure', errorName: 'ZeroDivisionError' }]
    }
  };
  const summary = {
    ...whole,
    status: {
      ...b1.status,
      resultsSummary: {
        cells: 1,
        byStatus: { Failure: 1 },
        outputTruncatedCells: 0,
        failedCell: { cellIndex: 0, status: 'Failure' }
      }
    }
  };

  it('a summary of the same version keeps the cell results already held', () => {
    let s = mergeJobs(initialState('all'), [whole], null);
    s = mergeJobs(s, [summary], 'all');
    expect(s.jobs[0].status?.results?.length).toBe(1);
  });

  it('a summary of a newer version replaces the job', () => {
    let s = mergeJobs(initialState('all'), [whole], null);
    const newer = { ...summary, metadata: { ...summary.metadata, resourceVersion: '8' } };
    s = mergeJobs(s, [newer], 'all');
    expect(s.jobs[0].status?.results).toBeUndefined();
    expect(s.jobs[0].status?.resultsSummary?.cells).toBe(1);
  });
});
