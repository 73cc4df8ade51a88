/**
 * Following a job's build log while it builds: GET …/buildlog?offset=N
 * every POLL_MS while the job is Building (and once more after, until the
 * server says the log is complete), appending what is new. Keeps the tail
 * (MAX_CHARS) only. Needs nothing from JupyterLab (a fake API in jest).
 */
import { ISignal, Signal } from '@lumino/signaling';
import { isTerminal } from './phases';
import type { IValidationAPI } from './types';

export const POLL_MS = 1000;

/** The build is over (or never happened): a log that is not there will not come. */
export function pastBuild(phase: string): boolean {
  return phase === 'BuildComplete' || phase === 'ValidationRunning' || isTerminal(phase);
}
export const MAX_CHARS = 200_000;

/** 'unknown' before the first answer; 'none' after a 404 (no build, or not started yet). */
export type LogAvailability = 'unknown' | 'yes' | 'none';

export class BuildLogFollower {
  constructor(
    readonly api: IValidationAPI,
    readonly name: string,
    readonly pollMs = POLL_MS
  ) {}

  get text(): string {
    return this._text;
  }

  /** Characters dropped from the head to keep the tail. */
  get dropped(): number {
    return this._dropped;
  }

  get available(): LogAvailability {
    return this._available;
  }

  /** The server said the log is whole (X-Build-Log-Complete: true). */
  get complete(): boolean {
    return this._complete;
  }

  get offset(): number {
    return this._offset;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * The job's phase changed (or the panel rendered): poll while it builds,
   * then until the log is complete; a job that never built ends with 'none'.
   */
  follow(phase: string): void {
    this._phase = phase;
    if (this._disposed) {
      return;
    }
    if (this._wanted() && this._timer === null && !this._busy) {
      void this.poll();
    }
  }

  /** One GET from the current offset; appends what is new. */
  async poll(): Promise<void> {
    if (this._busy || this._disposed) {
      return;
    }
    this._busy = true;
    try {
      const chunk = await this.api.buildLog(this.name, this._offset);
      if (this._disposed) {
        return;
      }
      if (chunk === null) {
        this._available = this._text ? 'yes' : 'none';
        if (pastBuild(this._phase)) {
          this._complete = true; // no build, or no log to wait for
        }
      } else {
        this._available = 'yes';
        const decoded = chunk.raw
          ? this._decoder.decode(chunk.raw, { stream: chunk.nextOffset !== null })
          : chunk.text;
        if (chunk.nextOffset === null) {
          // a server without offsets: the whole log each time
          this._setText(decoded);
          this._complete = pastBuild(this._phase);
        } else {
          if (chunk.nextOffset >= this._offset) {
            this._setText(this._text + decoded, true);
            this._offset = chunk.nextOffset;
          }
          this._complete = chunk.complete === true;
        }
      }
      this._error = null;
    } catch (e) {
      this._error = e instanceof Error ? e.message : String(e);
    } finally {
      this._busy = false;
      if (isTerminal(this._phase)) {
        this._afterEnd++;
      }
    }
    this._changed.emit();
    this._schedule();
  }

  get error(): string | null {
    return this._error;
  }

  dispose(): void {
    this._disposed = true;
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
    }
    Signal.clearData(this);
  }

  private _wanted(): boolean {
    if (!this._phase || this._phase === 'Initializing') {
      return false; // no build has started yet: the next phase event brings us back
    }
    // a finished job whose server never says "complete": a few more tries, then stop
    return !this._complete && this._afterEnd < 3;
  }

  private _schedule(): void {
    if (this._disposed || this._timer !== null || !this._wanted()) {
      return;
    }
    this._timer = setTimeout(() => {
      this._timer = null;
      void this.poll();
    }, this.pollMs);
  }

  private _setText(text: string, appended = false): void {
    if (text.length > MAX_CHARS) {
      const cut = text.length - MAX_CHARS;
      this._dropped += appended ? cut : 0;
      text = text.slice(cut);
    }
    this._text = text;
  }

  private _text = '';
  private _dropped = 0;
  private _offset = 0;
  private _complete = false;
  private _available: LogAvailability = 'unknown';
  private _phase = '';
  private _busy = false;
  private _timer: ReturnType<typeof setTimeout> | null = null;
  private _disposed = false;
  private _error: string | null = null;
  private _afterEnd = 0;
  private _decoder = new TextDecoder('utf-8');
  private _changed = new Signal<this, void>(this);
}
