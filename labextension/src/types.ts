/**
 * Shapes of the documents served by the nbvalidation REST API
 * (`{baseUrl}nbvalidation/api/v1`). Pure types: no runtime imports, so the
 * logic modules that use them stay testable without JupyterLab.
 */

export type { Phase } from './vocabulary';
import type { Phase } from './vocabulary';

/** A job's spec: generated from the server's spec table (jupyter_nbvalidation/core/spec_table.py). */
export type { IJobSpec } from './spec.generated';
import type { IJobSpec } from './spec.generated';
import type { IProjectSettings, PartialSpec } from './projectsettings';

export interface ITransition {
  phase: string;
  reason?: string;
  message?: string;
  time: string;
}

export interface ICellResult {
  cellIndex: number;
  status: 'Success' | 'Failure' | 'Skipped' | string;
  executionTime?: number | string | null;
  errorName?: string | null;
  errorMessage?: string | null;
  output?: string | null;
  /** "code" | "markdown" | "raw" (when the server says; else read from the notebook) */
  cellType?: string;
  /** traceback frames, when the server splits them (kind "cell" = the notebook's own cell) */
  frames?: Array<{ kind: string; text: string }>;
  skipReason?: string;
  /** the cell's output beyond the job's outputLimits was cut from the stored notebook */
  outputTruncated?: { bytes: number; limit: string };
}

/** GET /jobs lists a summary in place of status.results (GET /jobs/{name} is whole). */
export interface IResultsSummary {
  cells: number;
  byStatus: Record<string, number>;
  outputTruncatedCells: number;
  failedCell: ICellResult | null;
}

export interface ICellDiff {
  cellIndex: number;
  diffType?: string;
  expected?: string | null;
  actual?: string | null;
  diff?: string | null;
  severity?: string;
}

export interface IComparisonResult {
  strategy?: string;
  result?: 'matched' | 'failed' | string;
  totalCells?: number;
  matchedCells?: number;
  mismatchedCells?: number;
  skippedCells?: number;
  diffs?: ICellDiff[];
  /** the tolerances the comparison used */
  tolerance?: { absolute?: number; relative?: number };
  /** nbval's lax mode: only cells marked to be checked were compared */
  lax?: boolean;
}

/** status.progress: written during ValidationRunning (at most once a second). */
export interface IProgress {
  cellsTotal?: number;
  cellsDone?: number;
  currentCellIndex?: number | null;
  currentCellStartedAt?: string | null;
  cells?: Array<{ cellIndex: number; status: string; executionTime?: number | null }>;
  updatedAt?: string;
}

/** One answer of GET /jobs/{name}/buildlog?offset=N. */
export interface IBuildLogChunk {
  /** the text from `offset` on, when already decoded */
  text: string;
  /** the raw bytes from `offset` on (decoded by the follower: a character may span two answers) */
  raw?: Uint8Array;
  /** bytes of this answer */
  bytes: number;
  /** X-Build-Log-Next-Offset, or null when the server does not send it (then `text` is the whole log) */
  nextOffset: number | null;
  /** X-Build-Log-Complete (null when not sent) */
  complete: boolean | null;
}

export interface IBuildStatus {
  phase?: string;
  imageReference?: string;
  startTime?: string;
  completionTime?: string;
  duration?: string;
  strategy?: string;
  message?: string;
  logPath?: string;
  /** a reused environment: when it was built */
  builtAt?: string;
}

export interface IJobStatus {
  phase?: Phase | string;
  reason?: string;
  message?: string;
  startTime?: string;
  completionTime?: string;
  conditions?: Array<Record<string, unknown>>;
  buildStatus?: IBuildStatus;
  results?: ICellResult[];
  resultsSummary?: IResultsSummary;
  comparisonResult?: IComparisonResult;
  failedCellIndex?: number | null;
  transitions?: ITransition[];
  progress?: IProgress | null;
  /** what the environment is built from ("2 requirements from requirements.txt beside the notebook") */
  environment?: string;
}

export interface IJob {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    uid?: string;
    creationTimestamp?: string;
    resourceVersion?: string;
    [k: string]: unknown;
  };
  spec: IJobSpec;
  status?: IJobStatus;
}

export interface IJobEvent {
  metadata?: { name?: string };
  reason: string;
  type?: 'Normal' | 'Warning' | string;
  note?: string;
  action?: string;
  eventTime: string;
  regarding?: { name?: string; uid?: string; kind?: string };
  reportingController?: string;
  reportingInstance?: string;
}

export interface IJobList {
  items: IJob[];
  metadata?: { continue?: string | null };
}

export interface IEventList {
  items: IJobEvent[];
}

/** Data of a jupyter_events record with schema id {@link JOB_EVENT_SCHEMA}. */
export interface ILiveJobEvent {
  name: string;
  notebook?: string;
  phase?: string;
  reason?: string;
  message?: string;
  type?: string;
  time?: string;
}

export interface IHealth {
  backend?: string;
  usable?: boolean;
  [k: string]: unknown;
}

export const JOB_EVENT_SCHEMA = 'https://nbvalidation.dev/events/job/v1';

/** What the panel model needs from the REST client (a fake in unit tests). */
export interface IValidationAPI {
  health(): Promise<IHealth>;
  listJobs(notebook?: string | null, limit?: number): Promise<IJobList>;
  getJob(name: string): Promise<IJob>;
  createJob(spec: IJobSpec): Promise<IJob>;
  cancelJob(name: string): Promise<void>;
  events(name: string): Promise<IEventList>;
  buildLogUrl(name: string): string;
  executedNotebookUrl(name: string): string;
  /** Part of the build log from byte `offset`; null when the job has no build log (404). */
  buildLog(name: string, offset: number): Promise<IBuildLogChunk | null>;
  /** The executed notebook, or null while there is none (404). */
  executedNotebook(name: string): Promise<Record<string, unknown> | null>;
  /** What changed since the notebook's last success; null when the server cannot say (404). */
  changes?(name: string): Promise<IChanges | null>;
  /** The exact pins of the job's environment as a requirements file (GET …/lock; a 404 throws, saying why). */
  lock?(name: string): Promise<string>;
  /** The server's search for the cause of a failed job (GET …/bisect); null when none was started (404). */
  bisection?(name: string): Promise<IBisection | null>;
  /** Start that search (POST …/bisect); one already running is answered as it is. */
  startBisection?(name: string): Promise<IBisection>;
  /** Stop it (DELETE …/bisect): its running step is cancelled. */
  stopBisection?(name: string): Promise<IBisection>;
  /** The project settings of a notebook (null: this server keeps none). */
  projectSettings?(notebook: string): Promise<IProjectSettings | null>;
  /** Write a notebook's own entry in the project settings file. */
  saveProjectSettings?(notebook: string, options: PartialSpec): Promise<IProjectSettings>;
  /** The caller's notifications, newest first (GET …/notifications). */
  notifications?(): Promise<INotificationList>;
  /** Mark one seen (POST …/notifications/{name}/seen). */
  markNotificationSeen?(name: string): Promise<INotification>;
}

/** A schedule's series that changed colour (notify.py; docs/watching.md, "When it turns red"). */
export interface INotification {
  /** the job's name */
  id: string;
  event: 'turned-red' | 'infrastructure-failed' | 'back-to-green';
  time: string | null;
  schedule: string | null;
  job: { name: string; notebook?: string | null; phase?: string | null; reason?: string | null };
  culprit: {
    kind: 'commit' | 'packages' | 'unknown';
    message: string;
    [key: string]: unknown;
  } | null;
  /** when its owner marked it seen; null while unseen */
  seen: string | null;
  [key: string]: unknown;
}

export interface INotificationList {
  items: INotification[];
  unseen: number;
}

/** GET /jobs/{name}/bisect (bisect_runs.py): which package changes turned a failed job red. */
export interface IBisection {
  job: string;
  state: 'running' | 'finished' | 'stopped';
  maxSteps: number;
  /** what `jupyter nbvalidation bisect` prints, so far */
  lines: string[];
  steps: Array<{ job: string; outcome: string; text?: string }>;
  /** once it ended: `result` (found, incomplete, not-found, notebook, …, error, stopped) and `message` */
  result: { result: string; message: string; exitCode?: number } | null;
}

/** GET /jobs/{name}/changes (changes.py): a job against its notebook's last success. */
export interface IChanges {
  /** the earlier Succeeded job, or null when the notebook never passed before */
  since: { name: string; completionTime?: string | null } | null;
  /** "pandas 2.2.3 → 3.0.0; no cell changed" */
  sentence: string;
  [key: string]: unknown;
}

/**
 * A NotebookValidationSchedule as the REST API answers it (service/schedules.py;
 * docs/watching.md, Schedules). Written by hand: tools/gen_spec.py generates the job spec only.
 */
export interface IScheduleRun {
  job: string;
  phase: string;
  reason?: string | null;
  /** the resolved commit of a git source, else null */
  commit?: string | null;
  finished?: string | null;
}

export interface IScheduleStatus {
  lastScheduleTime?: string | null;
  lastTickTime?: string | null;
  /** null while paused */
  nextScheduleTime?: string | null;
  /** the run still going, or null */
  active?: string | null;
  skipped?: number;
  message?: string | null;
  /** the last runs, newest first (the strip of verdicts) */
  recent?: IScheduleRun[];
}

export interface ISchedule {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; uid?: string; creationTimestamp?: string };
  spec: {
    schedule: string;
    suspend: boolean;
    concurrencyPolicy?: string;
    successfulJobsHistoryLimit?: number;
    failedJobsHistoryLimit?: number;
    jobTemplate: { spec: IJobSpec };
  };
  status?: IScheduleStatus;
}

export interface IScheduleList {
  items: ISchedule[];
}

/** What the Schedules tab needs from the REST client (a fake in unit tests). */
export interface ISchedulesAPI {
  listSchedules(): Promise<IScheduleList>;
  /** PATCH {"spec": {"suspend": …}}: pause (true) or resume (false). */
  setSuspend(name: string, suspend: boolean): Promise<ISchedule>;
  /** POST …/trigger: run now (a 409 while its last run still goes). */
  trigger(name: string): Promise<IJob>;
}
