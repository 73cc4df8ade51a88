/**
 * The Schedules tab's model: the user's schedules (GET /schedules), re-read while the tab is
 * shown (never while the panel or the browser tab is hidden), Pause/Resume (PATCH suspend),
 * Run now (POST trigger; a 409 while a run goes is a short note on the row, not an error), and
 * a mark of a strip opening that run in the panel's job view, by the job's name.
 */
import { ISignal, Signal } from '@lumino/signaling';
import type { NBValidationAPI } from './api';
import { APIError } from './errors';
import { describe } from './model';
import { busySoon } from './strip';
import type { IJob, ISchedule, IScheduleList, ISchedulesAPI } from './types';

/** While a run goes or a tick is near, the tab re-reads this often. */
export const SCHEDULES_BUSY_POLL_MS = 2000;
/** Otherwise, this often. */
export const SCHEDULES_IDLE_POLL_MS = 15_000;
/** "Near": a tick within this long. */
export const SCHEDULES_NEAR_MS = 20_000;
/** A row's note (a 409, a refused pause) stays this long. */
export const NOTE_MS = 8000;

export type PanelView = 'jobs' | 'schedules';

/** What the tab asks of the panel's job model: open a job by name. */
export interface IJobOpener {
  openJob(name: string): Promise<void>;
}

/** The schedule routes over the panel's REST client. */
export class SchedulesAPI implements ISchedulesAPI {
  constructor(readonly api: NBValidationAPI) {}

  listSchedules(): Promise<IScheduleList> {
    return this.api.json<IScheduleList>(['schedules']);
  }

  setSuspend(name: string, suspend: boolean): Promise<ISchedule> {
    return this.api.json<ISchedule>(['schedules', name], {
      method: 'PATCH',
      body: JSON.stringify({ spec: { suspend } })
    });
  }

  trigger(name: string): Promise<IJob> {
    return this.api.json<IJob>(['schedules', name, 'trigger'], { method: 'POST', body: '{}' });
  }
}

export class SchedulesModel {
  constructor(
    readonly api: ISchedulesAPI,
    readonly jobs: IJobOpener
  ) {}

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Which of the panel's views is shown: the jobs or the schedules. */
  get view(): PanelView {
    return this._view;
  }

  get schedules(): readonly ISchedule[] {
    return this._schedules;
  }

  /** True once the first answer came (the empty state is then true). */
  get loaded(): boolean {
    return this._loaded;
  }

  /** The server keeps no schedules (a 501: the Kubernetes backend): why, in one sentence. */
  get unsupported(): string | null {
    return this._unsupported;
  }

  /** The last list error (server unreachable, …), or null. */
  get error(): string | null {
    return this._error;
  }

  /** A short note on a schedule's row (a run still going, a refused change), or null. */
  note(name: string): string | null {
    return this._notes.get(name) ?? null;
  }

  /** Whether a change of that schedule is on its way (its buttons wait). */
  busy(name: string): boolean {
    return this._busy.has(name);
  }

  setView(view: PanelView): void {
    if (view !== this._view) {
      this._view = view;
      this._emit();
      this._syncPoll();
    }
  }

  /** The panel was shown or hidden: the tab polls only while it is seen. */
  setVisible(visible: boolean): void {
    if (visible !== this._visible) {
      this._visible = visible;
      this._syncPoll();
    }
  }

  /** Whether the tab is on screen now (and so is re-read). */
  get polling(): boolean {
    return this._timer !== null || this._inflight !== null;
  }

  async refresh(): Promise<void> {
    if (this._inflight) {
      return this._inflight;
    }
    this._inflight = (async () => {
      try {
        const list = await this.api.listSchedules();
        this._schedules = [...(list.items ?? [])].sort((a, b) =>
          a.metadata.name < b.metadata.name ? -1 : a.metadata.name > b.metadata.name ? 1 : 0
        );
        this._unsupported = null;
        this._error = null;
      } catch (e) {
        // 501: a backend without schedules; a 404 without a code: a server without the routes
        if (e instanceof APIError && (e.status === 501 || (e.status === 404 && !e.code))) {
          this._unsupported = e.message;
          this._schedules = [];
          this._error = null;
        } else {
          this._error = describe(e);
        }
      } finally {
        this._loaded = true;
        this._inflight = null;
        this._emit();
      }
    })();
    return this._inflight;
  }

  /** Pause (true) or resume (false). */
  async setSuspend(name: string, suspend: boolean): Promise<void> {
    await this._change(name, async () => {
      const doc = await this.api.setSuspend(name, suspend);
      this._replace(doc);
    });
  }

  /** Run now; a run still going is a note on the row (409), not an error. */
  async runNow(name: string): Promise<void> {
    await this._change(name, async () => {
      try {
        await this.api.trigger(name);
      } catch (e) {
        if (e instanceof APIError && e.status === 409) {
          this._setNote(name, 'A run is still going; Run now again when it ends.');
          return;
        }
        throw e;
      }
      this._setNote(name, 'Started a run.');
      await this.refresh();
    });
  }

  /** A mark of a strip was clicked: that run in the panel's job view. */
  async openRun(schedule: string, job: string): Promise<void> {
    try {
      await this.jobs.openJob(job);
    } catch (e) {
      this._setNote(
        schedule,
        e instanceof APIError && e.status === 404
          ? `The run ${job} is gone (a schedule keeps only its last runs).`
          : `Could not open the run ${job}: ${describe(e)}`
      );
      return;
    }
    this.setView('jobs');
  }

  dispose(): void {
    this._disposed = true;
    this._stopPoll();
    for (const t of this._noteTimers.values()) {
      clearTimeout(t);
    }
    this._noteTimers.clear();
    Signal.clearData(this);
  }

  private async _change(name: string, work: () => Promise<void>): Promise<void> {
    if (this._busy.has(name)) {
      return;
    }
    this._busy.add(name);
    this._emit();
    try {
      await work();
    } catch (e) {
      this._setNote(name, describe(e));
    } finally {
      this._busy.delete(name);
      this._emit();
    }
  }

  private _replace(doc: ISchedule): void {
    this._schedules = this._schedules.map(s => (s.metadata.name === doc.metadata.name ? doc : s));
    this._notes.delete(doc.metadata.name);
  }

  private _setNote(name: string, text: string): void {
    this._notes.set(name, text);
    const old = this._noteTimers.get(name);
    if (old !== undefined) {
      clearTimeout(old);
    }
    const timer = setTimeout(() => {
      this._noteTimers.delete(name);
      this._notes.delete(name);
      this._emit();
    }, NOTE_MS);
    (timer as unknown as { unref?: () => void }).unref?.();
    this._noteTimers.set(name, timer);
    this._emit();
  }

  private get _active(): boolean {
    return !this._disposed && this._visible && this._view === 'schedules';
  }

  private _syncPoll(): void {
    if (!this._active) {
      this._stopPoll();
      return;
    }
    if (this._timer === null) {
      void this.refresh().then(() => this._next());
    }
  }

  private _next(): void {
    if (!this._active || this._timer !== null) {
      return;
    }
    const soon = busySoon(this._schedules, Date.now(), SCHEDULES_NEAR_MS);
    this._timer = setTimeout(
      () => {
        this._timer = null;
        if (!this._active) {
          return;
        }
        if (typeof document !== 'undefined' && document.hidden) {
          this._next(); // the browser tab is hidden: look again later, fetch nothing
          return;
        }
        void this.refresh().then(() => this._next());
      },
      soon ? SCHEDULES_BUSY_POLL_MS : SCHEDULES_IDLE_POLL_MS
    );
  }

  private _stopPoll(): void {
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
    }
  }

  private _emit(): void {
    if (!this._disposed) {
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _view: PanelView = 'jobs';
  private _visible = false;
  private _schedules: ISchedule[] = [];
  private _loaded = false;
  private _unsupported: string | null = null;
  private _error: string | null = null;
  private _notes = new Map<string, string>();
  private _noteTimers = new Map<string, ReturnType<typeof setTimeout>>();
  private _busy = new Set<string>();
  private _timer: ReturnType<typeof setTimeout> | null = null;
  private _inflight: Promise<void> | null = null;
  private _disposed = false;
}
