import { APIError } from '../src/errors';
import { ValidationModel } from '../src/model';
import type { IEventList, IHealth, IJob, IJobList, IJobSpec, IValidationAPI } from '../src/types';
import { ev, job, tr } from './fixtures';

class FakeAPI implements IValidationAPI {
  jobs: IJob[] = [];
  eventsByJob: Record<string, IEventList['items']> = {};
  healthAnswers: Array<IHealth | APIError> = [{ backend: 'local', usable: true }];
  calls: string[] = [];

  async health(): Promise<IHealth> {
    this.calls.push('health');
    const next =
      this.healthAnswers.length > 1 ? this.healthAnswers.shift()! : this.healthAnswers[0];
    if (next instanceof APIError) {
      throw next;
    }
    return next;
  }
  async listJobs(notebook?: string | null): Promise<IJobList> {
    this.calls.push(`list ${notebook ?? '*'}`);
    return {
      items: this.jobs.filter(j => !notebook || j.spec.notebook.path === notebook),
      metadata: { continue: null }
    };
  }
  async getJob(name: string): Promise<IJob> {
    this.calls.push(`get ${name}`);
    const found = this.jobs.find(j => j.metadata.name === name);
    if (!found) {
      throw new APIError(404, 'not found', 'NotFound');
    }
    return found;
  }
  async createJob(spec: IJobSpec): Promise<IJob> {
    this.calls.push('create');
    const j = job(`new-${this.jobs.length}`, spec.notebook.path, '', 100);
    this.jobs.push(j);
    return j;
  }
  async cancelJob(name: string): Promise<void> {
    this.calls.push(`cancel ${name}`);
  }
  async events(name: string) {
    this.calls.push(`events ${name}`);
    return { items: this.eventsByJob[name] ?? [] };
  }
  buildLogUrl(name: string): string {
    return `/log/${name}`;
  }
  executedNotebookUrl(name: string): string {
    return `/nb/${name}`;
  }
  async buildLog(): Promise<null> {
    return null;
  }
  async executedNotebook(): Promise<null> {
    return null;
  }
}

const flush = () => new Promise(resolve => setTimeout(resolve, 0));

let api: FakeAPI;
let model: ValidationModel;

beforeEach(() => {
  api = new FakeAPI();
  api.jobs = [
    job('a-1', 'a.ipynb', 'Succeeded', 1, [tr('Initializing', 1), tr('Succeeded', 5)]),
    job('a-2', 'a.ipynb', 'Building', 10, [tr('Initializing', 10), tr('Building', 11)]),
    job('b-1', 'b.ipynb', 'Failed', 5)
  ];
  api.eventsByJob['a-2'] = [ev('Accepted', 10), ev('BuildStarted', 11)];
  model = new ValidationModel(api);
});

afterEach(() => model.dispose());

describe('ValidationModel', () => {
  it('lists the active notebook, selects its newest job and loads its events', async () => {
    model.setNotebook('a.ipynb');
    await flush();
    await model.refresh();
    expect(model.visibleJobs.map(j => j.metadata.name)).toEqual(['a-2', 'a-1']);
    expect(model.selectedJob?.metadata.name).toBe('a-2');
    expect(model.state.events['a-2'].map(e => e.reason)).toEqual(['Accepted', 'BuildStarted']);
    expect(model.activeNotebookJob?.metadata.name).toBe('a-2');
    expect(api.calls).toContain('list a.ipynb');
    expect(api.calls).not.toContain('list *');
  });

  it('a live event for a shown job costs one GET of the job and one of its events', async () => {
    model.setNotebook('a.ipynb');
    await model.refresh();
    api.calls = [];
    api.jobs[1] = job('a-2', 'a.ipynb', 'BuildComplete', 10, [
      tr('Initializing', 10),
      tr('Building', 11),
      tr('BuildComplete', 20)
    ]);
    model.onLiveEvent({
      name: 'a-2',
      notebook: 'a.ipynb',
      phase: 'BuildComplete',
      reason: 'BuildSucceeded',
      time: '2026-11-29T15:00:20Z'
    });
    // merged at once, before the GETs return
    expect(model.selectedJob?.status?.phase).toBe('BuildComplete');
    await flush();
    await flush();
    expect(api.calls.sort()).toEqual(['events a-2', 'get a-2']);
  });

  it('a burst of live events for one job is coalesced', async () => {
    model.setNotebook('a.ipynb');
    await model.refresh();
    api.calls = [];
    for (const phase of ['BuildComplete', 'ValidationRunning', 'Succeeded']) {
      model.onLiveEvent({ name: 'a-2', notebook: 'a.ipynb', phase, time: '2026-11-29T15:00:20Z' });
    }
    await model.refreshJob('a-2');
    const gets = api.calls.filter(c => c === 'get a-2').length;
    expect(gets).toBeGreaterThanOrEqual(1);
    expect(gets).toBeLessThanOrEqual(2);
  });

  it('an event for an unknown job of this notebook reloads the list; others are ignored', async () => {
    model.setNotebook('a.ipynb');
    await model.refresh();
    api.calls = [];
    model.onLiveEvent({ name: 'zzz', notebook: 'other.ipynb', phase: 'Initializing' });
    await flush();
    expect(api.calls).toEqual([]);
    api.jobs.push(job('a-3', 'a.ipynb', 'Initializing', 30));
    model.onLiveEvent({ name: 'a-3', notebook: 'a.ipynb', phase: 'Initializing' });
    await flush();
    await flush();
    expect(api.calls).toContain('list a.ipynb');
  });

  it('submits and selects the new job', async () => {
    model.setNotebook('b.ipynb');
    await model.refresh();
    const created = await model.submit({ notebook: { path: 'b.ipynb' } });
    expect(model.selectedJob?.metadata.name).toBe(created.metadata.name);
    expect(model.visibleJobs.map(j => j.metadata.name)).toEqual([created.metadata.name, 'b-1']);
  });

  it('drops a job the server no longer knows', async () => {
    model.setScope('all');
    await model.refresh();
    api.jobs = api.jobs.filter(j => j.metadata.name !== 'b-1');
    await model.refreshJob('b-1');
    expect(model.state.jobs.map(j => j.metadata.name)).not.toContain('b-1');
  });

  it('reports a fetch error and clears it on success', async () => {
    model.setNotebook('a.ipynb');
    await model.refresh();
    const original = api.listJobs.bind(api);
    api.listJobs = async () => {
      throw new APIError(500, 'boom');
    };
    await model.refresh();
    expect(model.error).toBe('boom');
    api.listJobs = original;
    await model.refresh();
    expect(model.error).toBeNull();
  });
});

describe('probe', () => {
  it('says missing on 404', async () => {
    api.healthAnswers = [new APIError(404, 'Not Found')];
    expect(await model.probe(0, 0)).toBe('missing');
  });

  it('waits for a backend that is still starting', async () => {
    api.healthAnswers = [
      { backend: 'local', usable: false, problem: null },
      { backend: 'local', usable: true }
    ];
    expect(await model.probe(3, 1)).toBe('ok');
  });

  it('a failed refresh re-probes, so an outage (and its end) reaches the panel', async () => {
    model.setNotebook('a.ipynb');
    expect(await model.probe(0, 0)).toBe('ok');
    const original = api.listJobs.bind(api);
    api.listJobs = async () => {
      throw new APIError(503, 'unavailable');
    };
    api.healthAnswers = [
      { backend: 'kubernetes', usable: false, problem: 'API server unreachable' }
    ];
    await model.refresh();
    await flush();
    expect(model.server).toBe('unusable');
    expect(model.serverDetail).toBe('API server unreachable');
    api.listJobs = original;
    api.healthAnswers = [{ backend: 'kubernetes', usable: true }];
    expect(await model.probe(0, 0)).toBe('ok');
  });

  it('says unusable with the problem', async () => {
    api.healthAnswers = [{ backend: 'kubernetes', usable: false, problem: 'CRD not installed' }];
    expect(await model.probe(3, 1)).toBe('unusable');
    expect(model.serverDetail).toBe('CRD not installed');
  });
});
