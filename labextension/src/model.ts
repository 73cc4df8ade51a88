/**
 * The panel's live model: holds the pure {@link IPanelState}, fetches from
 * the REST API, merges live job events, and ticks while a job runs.
 *
 * Update strategy (no busy polling): a jupyter_events record for a shown job
 * triggers one GET of that job and one of its events; a slow safety poll
 * (10 s) reconciles while something runs, in case the event stream dropped.
 */
import { ISignal, Signal } from '@lumino/signaling';
import { BuildLogFollower } from './buildlog';
import { APIError } from './errors';
import { isTerminal } from './phases';
import {
  IPanelState,
  Scope,
  addSubmittedJob,
  anyRunning,
  applyLiveEvent,
  newerJob,
  openJob,
  sortJobs,
  initialState,
  latestJobFor,
  mergeJobs,
  selectJob,
  selectedJob,
  setEvents,
  setNotebook,
  setScope,
  visibleJobs
} from './state';
import type { IChanges, IJob, IJobSpec, ILiveJobEvent, IValidationAPI } from './types';

export type ServerState = 'unknown' | 'ok' | 'missing' | 'unusable' | 'unreachable';

export const SAFETY_POLL_MS = 10_000;
/** With nothing running, the list is re-read this often (jobs started by another process). */
/** While a shown job is ValidationRunning, it is re-read this often (status.progress is no event). */
export const PROGRESS_POLL_MS = 1500;
/** How many jobs the all-notebooks index (file browser badges) reads. */
export const INDEX_LIMIT = 200;
export const IDLE_POLL_MS = 30_000;

const EMPTY: ReadonlySet<number> = new Set();

export class ValidationModel {
  constructor(readonly api: IValidationAPI) {}

  get state(): IPanelState {
    return this._state;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Last error of a background fetch, shown in the panel; null when fine. */
  get error(): string | null {
    return this._listError ?? this._jobError;
  }

  get server(): ServerState {
    return this._server;
  }

  get serverDetail(): string {
    return this._serverDetail;
  }

  get loading(): boolean {
    return this._loading > 0;
  }

  get visibleJobs(): IJob[] {
    return visibleJobs(this._state);
  }

  get selectedJob(): IJob | null {
    return selectedJob(this._state);
  }

  /** The newest job of the active notebook (status-bar verdict). */
  get activeNotebookJob(): IJob | null {
    return latestJobFor(this._state.jobs, this._state.notebookPath);
  }

  /**
   * The one clock of the panel and the status bar (ms since the epoch): read at each change,
   * and every second while the selected job or the active notebook's job runs, so both show the
   * same elapsed time from the same start.
   */
  get now(): number {
    return this._now;
  }

  private _syncClock(): void {
    const running = [this.selectedJob, this.activeNotebookJob].some(
      j => !!j && !isTerminal(j.status?.phase)
    );
    if (running && this._clock === null && !this._disposed) {
      const timer = setInterval(() => {
        this._now = Date.now();
        this._syncClock();
        if (!this._disposed) {
          this._changed.emit();
        }
      }, 1000);
      (timer as unknown as { unref?: () => void }).unref?.();
      this._clock = timer;
    } else if ((!running || this._disposed) && this._clock !== null) {
      clearInterval(this._clock);
      this._clock = null;
    }
  }

  /**
   * Probe the server extension: GET /health. A backend that is still
   * starting says usable=false without a problem; ask again a few times.
   */
  async probe(retries = 5, delayMs = 2000): Promise<ServerState> {
    try {
      let health = await this.api.health();
      for (let i = 0; i < retries && health.usable === false && !health.problem; i++) {
        await new Promise(resolve => setTimeout(resolve, delayMs));
        health = await this.api.health();
      }
      this._server = health.usable === false ? 'unusable' : 'ok';
      this._serverDetail = String(
        health.problem ?? health.message ?? health.reason ?? `backend ${health.backend ?? '?'}`
      );
    } catch (e) {
      if (e instanceof APIError && e.status === 404) {
        this._server = 'missing';
      } else {
        this._server = 'unreachable';
      }
      this._serverDetail = e instanceof Error ? e.message : String(e);
    }
    this._emit();
    return this._server;
  }

  setNotebook(path: string | null): void {
    const next = setNotebook(this._state, path);
    if (next === this._state) {
      return;
    }
    this._update(next);
    void this.refresh();
  }

  setScope(scope: Scope): void {
    this._update(setScope(this._state, scope));
    void this.refresh();
  }

  select(name: string | null): void {
    this._update(selectJob(this._state, name));
    if (name) {
      void this.refreshJob(name);
    }
  }

  /** Reload the job lists shown (and the selected job's events). */
  async refresh(): Promise<void> {
    const { scope, notebookPath } = this._state;
    this._loading++;
    this._emit();
    try {
      if (notebookPath) {
        const list = await this.api.listJobs(notebookPath);
        this._update(mergeJobs(this._state, list.items ?? [], notebookPath));
      }
      if (scope === 'all') {
        const list = await this.api.listJobs(null);
        // a limited list is complete only when it has no continuation
        const complete = !list.metadata?.continue;
        this._update(mergeJobs(this._state, list.items ?? [], complete ? 'all' : null));
      }
      this._listError = null;
    } catch (e) {
      this._listError = describe(e);
      if (this._server === 'ok') {
        void this.probe(0); // is the backend (or its cluster) gone? the banner says so
      }
    } finally {
      this._loading--;
      this._emit();
    }
    const selected = this._state.selected;
    if (selected) {
      await this.refreshJob(selected, !this._state.events[selected]);
    }
    this._schedulePoll();
  }

  /**
   * GET one job and its events. Calls for the same job coalesce: while one
   * is in flight, further requests just ask for one more round.
   */
  async refreshJob(name: string, withEvents = true): Promise<void> {
    const inflight = this._inflight.get(name);
    if (inflight) {
      inflight.again = true;
      return inflight.promise;
    }
    const entry = { again: false, promise: Promise.resolve() };
    entry.promise = (async () => {
      do {
        entry.again = false;
        try {
          const [job, events] = await Promise.all([
            this.api.getJob(name),
            withEvents ? this.api.events(name) : Promise.resolve(null)
          ]);
          let next = mergeJobs(this._state, [job], null);
          if (events) {
            next = setEvents(next, name, events.items ?? []);
          }
          this._update(next);
          this._jobError = null;
        } catch (e) {
          if (e instanceof APIError && e.status === 404) {
            // gone: drop it
            this._update(
              mergeJobs(
                { ...this._state, jobs: this._state.jobs.filter(j => j.metadata.name !== name) },
                [],
                null
              )
            );
          } else {
            this._jobError = describe(e);
            this._emit();
          }
        }
      } while (entry.again);
    })();
    this._inflight.set(name, entry);
    try {
      await entry.promise;
    } finally {
      this._inflight.delete(name);
    }
    this._schedulePoll();
  }

  /**
   * The newest job of every notebook the server knows of (the file
   * browser's verdict badges): the all-notebooks list, the jobs the panel
   * holds, and the live events since.
   */
  get latestByNotebook(): ReadonlyMap<string, IJob> {
    if (this._latestCache === null) {
      const byName = new Map<string, IJob>();
      for (const job of [...this._indexJobs, ...this._state.jobs]) {
        byName.set(job.metadata.name, newerJob(byName.get(job.metadata.name), job));
      }
      const latest = new Map<string, IJob>();
      for (const job of sortJobs([...byName.values()])) {
        const path = job.spec?.notebook?.path;
        if (path && !latest.has(path)) {
          latest.set(path, job);
        }
      }
      this._latestCache = latest;
    }
    return this._latestCache;
  }

  /** Re-read the all-notebooks list behind {@link latestByNotebook}. */
  async refreshIndex(): Promise<void> {
    try {
      const list = await this.api.listJobs(null, INDEX_LIMIT);
      this._indexJobs = list.items ?? [];
      this._latestCache = null;
      this._emit();
    } catch {
      // the badges keep what they had; the panel reports API errors
    }
  }

  /** A jupyter_events record of our schema arrived. */
  onLiveEvent(data: ILiveJobEvent): void {
    if (!data || !data.name) {
      return;
    }
    const index = applyLiveEvent({ ...initialState('all'), jobs: this._indexJobs }, data);
    if (index.known) {
      this._indexJobs = index.state.jobs;
      this._latestCache = null;
      this._emit();
    } else if (this._indexTimer === null) {
      this._indexTimer = setTimeout(() => {
        this._indexTimer = null;
        void this.refreshIndex();
      }, 300);
    }
    const merged = applyLiveEvent(this._state, data);
    this._update(merged.state);
    if (!merged.relevant) {
      return;
    }
    if (merged.known) {
      void this.refreshJob(data.name);
    } else {
      void this.refresh();
    }
    this._scheduleProgress();
  }

  /** Submit a job; the new job is added and selected. */
  async submit(spec: IJobSpec): Promise<IJob> {
    const job = await this.api.createJob(spec);
    this._update(addSubmittedJob(this._state, job));
    void this.refreshJob(job.metadata.name);
    return job;
  }

  /**
   * Open a job by name in the job view (a schedule's run, which may be of no open notebook):
   * listed with all notebooks and selected. A job that is gone throws (404).
   */
  async openJob(name: string): Promise<void> {
    const job = await this.api.getJob(name);
    this._update(openJob(this._state, job));
    void this.refresh(); // the list of all notebooks, and the job's events
  }

  async cancel(name: string): Promise<void> {
    await this.api.cancelJob(name);
    await this.refreshJob(name);
  }

  /** The (one) build log follower of a job; the panel asks on every render. */
  buildLog(name: string): BuildLogFollower {
    let follower = this._logs.get(name);
    if (!follower) {
      follower = new BuildLogFollower(this.api, name);
      this._logs.set(name, follower);
      // keep a few: the selected job's and the ones just looked at
      for (const [key, old] of this._logs) {
        if (this._logs.size <= 8) {
          break;
        }
        if (key !== name) {
          old.dispose();
          this._logs.delete(key);
        }
      }
    }
    return follower;
  }

  /** Cells of a job's diff accepted into the golden notebook (this session). */
  acceptedCells(name: string): ReadonlySet<number> {
    return this._accepted.get(name) ?? EMPTY;
  }

  markAccepted(name: string, index: number): void {
    const set = new Set(this._accepted.get(name) ?? []);
    set.add(index);
    this._accepted.set(name, set);
    this._emit();
  }

  /** What changed since the notebook's last success, for a finished job (fetched once), or null. */
  changes(name: string): Promise<IChanges | null> {
    let cached = this._changes.get(name);
    if (!cached) {
      cached = (this.api.changes ? this.api.changes(name) : Promise.resolve(null)).catch(e => {
        this._changes.delete(name);
        throw e;
      });
      this._changes.set(name, cached);
    }
    return cached;
  }

  /** The executed notebook of a finished job (fetched once), or null while there is none. */
  executedNotebook(name: string): Promise<Record<string, unknown> | null> {
    let cached = this._notebooks.get(name);
    if (!cached) {
      cached = this.api.executedNotebook(name).catch(e => {
        this._notebooks.delete(name);
        throw e;
      });
      this._notebooks.set(name, cached);
    }
    return cached;
  }

  dispose(): void {
    if (this._clock !== null) {
      clearInterval(this._clock);
      this._clock = null;
    }
    for (const follower of this._logs.values()) {
      follower.dispose();
    }
    this._logs.clear();
    if (this._pollTimer !== null) {
      clearTimeout(this._pollTimer);
      this._pollTimer = null;
    }
    if (this._progressTimer !== null) {
      clearTimeout(this._progressTimer);
      this._progressTimer = null;
    }
    if (this._indexTimer !== null) {
      clearTimeout(this._indexTimer);
      this._indexTimer = null;
    }
    this._disposed = true;
    Signal.clearData(this);
  }

  /** Cell progress: re-read the selected / active notebook's job while it validates. */
  private _scheduleProgress(): void {
    if (this._disposed || this._progressTimer !== null) {
      return;
    }
    const names = new Set<string>();
    for (const job of [this.selectedJob, this.activeNotebookJob]) {
      if (job && job.status?.phase === 'ValidationRunning') {
        names.add(job.metadata.name);
      }
    }
    if (!names.size) {
      return;
    }
    this._progressTimer = setTimeout(() => {
      this._progressTimer = null;
      if (typeof document !== 'undefined' && document.hidden) {
        this._scheduleProgress();
        return;
      }
      void Promise.all([...names].map(n => this.refreshJob(n, false)));
    }, PROGRESS_POLL_MS);
  }

  /** Safety net: while a shown job runs, reconcile every SAFETY_POLL_MS. */
  private _schedulePoll(): void {
    this._scheduleProgress();
    if (this._disposed || this._pollTimer !== null) {
      return;
    }
    const watched = [
      ...this.visibleJobs,
      ...(this.activeNotebookJob ? [this.activeNotebookJob] : [])
    ];
    const running = anyRunning(watched);
    this._pollTimer = setTimeout(
      () => {
        this._pollTimer = null;
        if (typeof document !== 'undefined' && document.hidden) {
          this._schedulePoll();
          return;
        }
        // the same tick notices a backend outage (and its end): /health says
        void this.probe(0).then(() => this.refresh());
      },
      running ? SAFETY_POLL_MS : IDLE_POLL_MS
    );
  }

  private _update(next: IPanelState): void {
    if (next !== this._state) {
      this._state = next;
      this._latestCache = null;
      this._emit();
    }
  }

  private _emit(): void {
    this._now = Date.now();
    this._syncClock();
    if (!this._disposed) {
      this._changed.emit();
    }
  }

  private _now = Date.now();
  private _clock: ReturnType<typeof setInterval> | null = null;

  private _state: IPanelState = initialState();
  private _changed = new Signal<this, void>(this);
  private _listError: string | null = null;
  private _jobError: string | null = null;
  private _server: ServerState = 'unknown';
  private _serverDetail = '';
  private _loading = 0;
  private _pollTimer: ReturnType<typeof setTimeout> | null = null;
  private _progressTimer: ReturnType<typeof setTimeout> | null = null;
  private _disposed = false;
  private _indexJobs: IJob[] = [];
  private _latestCache: Map<string, IJob> | null = null;
  private _indexTimer: ReturnType<typeof setTimeout> | null = null;
  private _accepted = new Map<string, Set<number>>();
  private _logs = new Map<string, BuildLogFollower>();
  private _notebooks = new Map<string, Promise<Record<string, unknown> | null>>();
  private _changes = new Map<string, Promise<IChanges | null>>();
  private _inflight = new Map<string, { again: boolean; promise: Promise<void> }>();
}

export function describe(e: unknown): string {
  if (e instanceof APIError) {
    return e.field ? `${e.message} (${e.field})` : e.message;
  }
  return e instanceof Error ? e.message : String(e);
}
