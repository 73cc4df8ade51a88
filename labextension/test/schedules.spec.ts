/**
 * The Schedules tab (issue 45): the strip of a schedule's last verdicts from its status, the
 * marks' titles and the run a click opens; the tab's model (Pause/Resume, Run now and its 409,
 * a server without schedules, polling only while seen); a run opened by name in the job view.
 */
import { APIError } from '../src/errors';
import { SchedulesModel } from '../src/schedules';
import { mergeJobs, openJob, selectedJob, setNotebook, initialState } from '../src/state';
import {
  busySoon,
  nextRunWords,
  scheduleMessage,
  scheduleState,
  stripMarks,
  stripText
} from '../src/strip';
import type { IJob, ISchedule, IScheduleList, IScheduleRun, ISchedulesAPI } from '../src/types';
import { job } from './fixtures';

function schedule(name: string, recent: IScheduleRun[], extra: Partial<ISchedule> = {}): ISchedule {
  return {
    apiVersion: 'nbvalidation.dev/v1alpha1',
    kind: 'NotebookValidationSchedule',
    metadata: { name },
    spec: {
      schedule: '0 3 * * *',
      suspend: false,
      jobTemplate: { spec: { notebook: { path: 'a.ipynb' } } }
    },
    status: {
      nextScheduleTime: '2026-12-09T03:00:00.000000Z',
      active: null,
      skipped: 0,
      recent
    },
    ...extra
  };
}

// newest first, as status.recent is
const RECENT: IScheduleRun[] = [
  {
    job: 'nightly-4',
    phase: 'Succeeded',
    reason: 'ValidationSucceeded',
    commit: '4f0c1d2e9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d',
    finished: '2026-12-08T03:00:41.118000Z'
  },
  {
    job: 'nightly-3',
    phase: 'Failed',
    reason: 'ValidationFailed',
    commit: null,
    finished: '2026-12-07T03:00:40.000000Z'
  },
  {
    job: 'nightly-2',
    phase: 'Failed',
    reason: 'InfrastructureFailed',
    commit: null,
    finished: '2026-12-06T03:00:40.000000Z'
  },
  { job: 'nightly-1', phase: 'Succeeded', reason: null, commit: null, finished: null }
];

describe('the strip of verdicts', () => {
  const s = schedule('nightly', RECENT);

  it('reads oldest to newest, left to right, as the CLI prints it', () => {
    expect(stripMarks(s).map(m => m.job)).toEqual([
      'nightly-1',
      'nightly-2',
      'nightly-3',
      'nightly-4'
    ]);
    expect(stripText(s)).toBe('✓⚠✗✓');
  });

  it('tells a failed notebook from a fault that is not its own, and a cancel', () => {
    const kinds = stripMarks(s).map(m => m.kind);
    expect(kinds).toEqual(['succeeded', 'infrastructure', 'failed', 'succeeded']);
    const cancelled = stripMarks(
      schedule('c', [{ job: 'c-1', phase: 'Failed', reason: 'Cancelled', finished: null }])
    );
    expect(cancelled[0].kind).toBe('cancelled');
    expect(cancelled[0].symbol).toBe('⊘');
    const running = stripMarks(schedule('r', [{ job: 'r-1', phase: 'ValidationRunning' }]));
    expect(running[0].kind).toBe('running');
    expect(running[0].symbol).toBe('…');
  });

  it('titles each mark with its job, verdict and reason, short commit and finished time', () => {
    const newest = stripMarks(s)[3];
    expect(newest.title.split('\n')).toEqual([
      'nightly-4',
      'Succeeded: validation passed',
      'commit 4f0c1d2',
      'finished 2026-12-08 03:00:41 UTC'
    ]);
    expect(newest.label).toBe(
      'nightly-4, Succeeded: validation passed, commit 4f0c1d2, finished 2026-12-08 03:00:41 UTC'
    );
    const failed = stripMarks(s)[2];
    expect(failed.title).toContain('Failed: validation failed');
    expect(failed.title).not.toContain('commit');
    // reason codes stay in the REST API: the title speaks in words
    expect(stripMarks(s)[1].title).toContain('Infrastructure error: server fault');
    expect(
      stripMarks(s)
        .map(m => m.title)
        .join('\n')
    ).not.toMatch(/ValidationFailed|InfrastructureFailed|ValidationSucceeded/);
    expect(stripMarks(s)[0].title.split('\n')).toEqual(['nightly-1', 'Succeeded']);
    const going = stripMarks(schedule('r', [{ job: 'r-1', phase: 'ValidationRunning' }]))[0];
    expect(going.title.split('\n')).toEqual(['r-1', 'Validation running', 'still running']);
  });

  it('has no mark without a run', () => {
    expect(stripMarks(schedule('none', []))).toEqual([]);
    expect(stripMarks({ ...schedule('x', []), status: undefined })).toEqual([]);
  });

  it('says the next run, paused or running', () => {
    expect(nextRunWords(s)).toBe('next 2026-12-09 03:00:00 UTC');
    expect(scheduleState(s)).toBe('Active');
    const paused: ISchedule = { ...s, spec: { ...s.spec, suspend: true } };
    expect(nextRunWords(paused)).toBe('paused');
    expect(scheduleState(paused)).toBe('Paused');
    const running: ISchedule = { ...s, status: { ...s.status, active: 'nightly-5' } };
    expect(scheduleState(running)).toBe('Running');
    expect(busySoon([running], Date.parse('2026-12-08T12:00:00Z'), 20_000)).toBe(true);
    expect(busySoon([s], Date.parse('2026-12-08T12:00:00Z'), 20_000)).toBe(false);
    expect(busySoon([s], Date.parse('2026-12-09T02:59:50Z'), 20_000)).toBe(true);
    const skipped: ISchedule = {
      ...s,
      status: {
        ...s.status,
        message: 'the tick at 2026-12-07T18:01:50.000000Z was skipped: job x was still running'
      }
    };
    expect(scheduleMessage(skipped)).toBe(
      'the tick at 2026-12-07 18:01:50 UTC was skipped: job x was still running'
    );
    expect(scheduleMessage(s)).toBe('');
  });
});

describe('a run opened by name', () => {
  it('is selected with all notebooks listed, though it is of no open notebook', () => {
    let state = setNotebook(initialState('notebook'), 'open.ipynb');
    state = mergeJobs(state, [job('mine', 'open.ipynb', 'Succeeded', 10)], 'open.ipynb');
    const run = job('nightly-3', 'tutorials/intro.ipynb', 'Failed', 5);
    state = openJob(state, run);
    expect(state.scope).toBe('all');
    expect(state.selected).toBe('nightly-3');
    expect(selectedJob(state)?.metadata.name).toBe('nightly-3');
    // a later refresh of the open notebook's list keeps it selected
    state = mergeJobs(state, [job('mine', 'open.ipynb', 'Succeeded', 10)], 'open.ipynb');
    expect(selectedJob(state)?.metadata.name).toBe('nightly-3');
  });
});

class FakeSchedules implements ISchedulesAPI {
  items: ISchedule[] = [schedule('b-nightly', RECENT), schedule('a-hourly', [])];
  listAnswer: APIError | null = null;
  triggerAnswer: APIError | null = null;
  calls: string[] = [];

  async listSchedules(): Promise<IScheduleList> {
    this.calls.push('list');
    if (this.listAnswer) {
      throw this.listAnswer;
    }
    return { items: this.items };
  }
  async setSuspend(name: string, suspend: boolean): Promise<ISchedule> {
    this.calls.push(`suspend ${name} ${suspend}`);
    const s = this.items.find(i => i.metadata.name === name)!;
    const changed = { ...s, spec: { ...s.spec, suspend } };
    this.items = this.items.map(i => (i === s ? changed : i));
    return changed;
  }
  async trigger(name: string): Promise<IJob> {
    this.calls.push(`trigger ${name}`);
    if (this.triggerAnswer) {
      throw this.triggerAnswer;
    }
    return job(`${name}-9`, 'a.ipynb', '', 0);
  }
}

class FakeOpener {
  opened: string[] = [];
  gone = new Set<string>();
  async openJob(name: string): Promise<void> {
    if (this.gone.has(name)) {
      throw new APIError(404, `job ${name} not found`, 'NotFound');
    }
    this.opened.push(name);
  }
}

describe('the Schedules tab model', () => {
  let api: FakeSchedules;
  let opener: FakeOpener;
  let model: SchedulesModel;

  beforeEach(() => {
    api = new FakeSchedules();
    opener = new FakeOpener();
    model = new SchedulesModel(api, opener);
  });
  afterEach(() => model.dispose());

  it('lists the schedules by name', async () => {
    await model.refresh();
    expect(model.loaded).toBe(true);
    expect(model.schedules.map(s => s.metadata.name)).toEqual(['a-hourly', 'b-nightly']);
  });

  it('opens a clicked mark in the job view, by its job name', async () => {
    model.setView('schedules');
    await model.refresh();
    const mark = stripMarks(model.schedules[1])[2];
    await model.openRun('b-nightly', mark.job);
    expect(opener.opened).toEqual(['nightly-3']);
    expect(model.view).toBe('jobs');
  });

  it('says so on the row when the run is gone, and stays on the tab', async () => {
    model.setView('schedules');
    opener.gone.add('nightly-1');
    await model.openRun('b-nightly', 'nightly-1');
    expect(model.view).toBe('schedules');
    expect(model.note('b-nightly')).toMatch(/nightly-1 is gone/);
  });

  it('pauses and resumes', async () => {
    await model.refresh();
    await model.setSuspend('b-nightly', true);
    expect(api.calls).toContain('suspend b-nightly true');
    expect(model.schedules.find(s => s.metadata.name === 'b-nightly')!.spec.suspend).toBe(true);
    await model.setSuspend('b-nightly', false);
    expect(model.schedules.find(s => s.metadata.name === 'b-nightly')!.spec.suspend).toBe(false);
  });

  it('shows a run still going (409) as a short note, not an error', async () => {
    await model.refresh();
    api.triggerAnswer = new APIError(409, "schedule 'b-nightly' still runs job x", 'Conflict');
    await model.runNow('b-nightly');
    expect(model.note('b-nightly')).toBe('A run is still going; Run now again when it ends.');
    expect(model.error).toBeNull();
    api.triggerAnswer = null;
    await model.runNow('b-nightly');
    expect(api.calls).toContain('trigger b-nightly');
    expect(model.note('b-nightly')).toBe('Started a run.');
  });

  it('says in one sentence that a server keeps no schedules (501)', async () => {
    api.listAnswer = new APIError(501, 'schedules are not available on the kubernetes backend yet');
    await model.refresh();
    expect(model.unsupported).toMatch(/not available/);
    expect(model.schedules).toEqual([]);
    expect(model.error).toBeNull();
    // an older server, without the routes
    api.listAnswer = new APIError(404, 'Not Found');
    await model.refresh();
    expect(model.unsupported).toBe('Not Found');
  });

  it('polls only while the tab is shown in a visible panel', async () => {
    jest.useFakeTimers();
    try {
      model.setView('schedules');
      await Promise.resolve();
      expect(api.calls).toEqual([]); // the panel is hidden
      model.setVisible(true);
      await jest.advanceTimersByTimeAsync(0);
      expect(api.calls).toEqual(['list']);
      await jest.advanceTimersByTimeAsync(15_000);
      expect(api.calls).toEqual(['list', 'list']);
      model.setView('jobs');
      await jest.advanceTimersByTimeAsync(60_000);
      expect(api.calls).toEqual(['list', 'list']);
      model.setView('schedules');
      await jest.advanceTimersByTimeAsync(0);
      expect(api.calls.length).toBe(3);
      model.setVisible(false);
      await jest.advanceTimersByTimeAsync(60_000);
      expect(api.calls.length).toBe(3);
    } finally {
      jest.useRealTimers();
    }
  });
});
