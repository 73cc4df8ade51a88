/**
 * Plain words for what a person reads in the lab (issue 42): the server's reason codes, spec
 * paths ("spec.goldenNotebook.path") and data-dir paths become sentences that say what happened
 * and what to do next. The codes stay in the REST API, `describe -o json` and the events as data
 * (the panel keeps them in data-* attributes only). Pure: no JupyterLab imports.
 */
import { cellLabel } from './cells';
import { basename, formatAgo, parseTime } from './format';
import type { IChanges, ICellDiff, IJob } from './types';

/** What each spec field is called in a sentence (the Options dialog's words). */
export const FIELD_WORDS: Record<string, string> = {
  notebook: 'the notebook',
  'notebook.path': 'the notebook',
  goldenNotebook: 'the golden notebook',
  'goldenNotebook.path': 'the golden notebook',
  inputFiles: 'the input files',
  podConfig: 'the build setting',
  'podConfig.buildConfig': 'the build setting',
  'podConfig.buildConfig.enabled': 'the build setting',
  comparisonConfig: 'the comparison settings',
  'comparisonConfig.floatingPointTolerance': 'the absolute tolerance',
  'comparisonConfig.relativeTolerance': 'the relative tolerance',
  'comparisonConfig.ignoreOutputTypes': 'the ignored outputs',
  'comparisonConfig.lax': 'lax mode',
  'comparisonConfig.sanitizers': 'the sanitizers',
  timeout: 'the timeout',
  cellTimeout: 'the cell timeout',
  parameters: 'the parameters',
  outputLimits: 'the output limits'
};

/** A spec field in words ("comparisonConfig.relativeTolerance" → "the relative tolerance"). */
export function fieldWords(field: string): string {
  const f = field.replace(/^(spec|options)\./, '');
  if (FIELD_WORDS[f]) {
    return FIELD_WORDS[f];
  }
  const top = f.split(/[.[]/)[0];
  return FIELD_WORDS[top] ?? 'an option';
}

/** The folder part of a root-relative path ("lessons/week1/"), "" at the root. */
function folderOf(path: string): string {
  const i = path.lastIndexOf('/');
  return i < 0 ? '' : path.slice(0, i + 1);
}

/** A spec field in a server message: "spec.X" (POST …/jobs) or "options.X" (PUT …/project-settings). */
const SPEC_PATH = /\b(?:spec|options)\.([A-Za-z]+(?:\.[A-Za-z]+)*(?:\[\d+\])?)/g;
/** An absolute path inside a Jupyter data dir's nbvalidation folder (environments, runs, logs). */
const DATA_DIR_PATH = /(?:\/[^\s/'"():]+)*\/nbvalidation\/((?:[^\s/'"():]+\/?)*)/g;
/** Build folders of environments: "/…/envs/.tmp-abc/bin/python" outside a data dir (a custom one). */
const ENV_PATH = /(?:\/[^\s/'"():]+)+\/envs\/((?:[^\s/'"():]+\/?)*)/g;

/** The server's data folders the lab has seen (from jobs' environment references and logs). */
const DATA_DIRS = new Set<string>();

/**
 * Learn the data folder from a job: the local backend's environment reference and build log
 * are absolute paths inside it ("<data dir>/nbvalidation/envs/<key>"), so a folder whose name
 * has spaces is hidden too (the patterns below stop at a space).
 */
export function learnDataDirs(job: IJob | null | undefined): void {
  const bs = job?.status?.buildStatus;
  for (const p of [bs?.imageReference, bs?.logPath]) {
    if (typeof p !== 'string' || !p.startsWith('/')) {
      continue;
    }
    const i = p.indexOf('/nbvalidation/');
    const j = p.indexOf('/envs/');
    const cut = i >= 0 ? i + '/nbvalidation/'.length : j >= 0 ? j + 1 : -1;
    if (cut > 1) {
      DATA_DIRS.add(p.slice(0, cut));
    }
  }
}

/**
 * `text` with the server's data-dir paths shortened to what matters to a person
 * ("/root/.local/share/jupyter/nbvalidation/envs/ab12/bin/python" → "…/envs/ab12/bin/python").
 */
export function hideDataDir(text: string): string {
  for (const dir of DATA_DIRS) {
    text = text.split(dir).join('…/');
  }
  return text
    .replace(DATA_DIR_PATH, (_m, rest: string) => (rest ? `…/${rest}` : '…'))
    .replace(ENV_PATH, (_m, rest: string) => `…/envs/${rest}`);
}

/**
 * A message of the server's, in words: a "spec.FIELD: no such notebook: NAME" refusal becomes
 * "The golden notebook NAME was not found next to analysis.ipynb (lessons/week1/)"; any other
 * spec path becomes the field's words; data-dir paths are shortened.
 */
export function plainMessage(message: string | null | undefined, notebookPath = ''): string {
  let text = String(message ?? '').trim();
  if (!text) {
    return '';
  }
  const missing =
    /\b(?:spec|options)\.([A-Za-z.]+): no such notebook: ([^\s;]+?)\.?(?=$|[\s;])/.exec(text);
  if (missing) {
    const what = fieldWords(missing[1]);
    const where = notebookPath
      ? ` next to ${basename(notebookPath)}${folderOf(notebookPath) ? ` (${folderOf(notebookPath)})` : ' (at the top of the server’s folder)'}`
      : '';
    const sentence =
      `${capital(what)} ${missing[2]} was not found${where}. ` +
      'Check its name in Options…, or create it there.';
    text = text.replace(missing[0], sentence);
  }
  text = text.replace(/\bthe server refused it: /g, '');
  // "spec.timeout: must be …" → "The timeout: must be …" (at a sentence's start) or "the timeout"
  text = text.replace(SPEC_PATH, (m: string, field: string) =>
    // "options.ipynb" is a file name, not the route's "options.goldenNotebook.path"
    m.startsWith('options.') && !FIELD_WORDS[field.split(/[.[]/)[0]] ? m : fieldWords(field)
  );
  text = text.replace(
    /(^|[.!?]\s+)(the|an) /g,
    (_m, pre: string, art: string) => `${pre}${capital(art)} `
  );
  return hideDataDir(text);
}

function capital(s: string): string {
  return s ? s[0].toUpperCase() + s.slice(1) : s;
}

/** The golden diff's kind in words ("output_mismatch" → "the output differs"). */
export const DIFF_WORDS: Record<string, string> = {
  output_mismatch: 'the output differs',
  missing_cell: 'the golden notebook has this cell, this run does not',
  extra_cell: 'this run has a cell the golden notebook does not',
  execution_error: 'the cell raised an error',
  source_mismatch: 'the cell’s code differs from the golden notebook’s'
};

/** "Cell 3: the output differs" (severity left to the data-severity attribute). */
export function diffHeading(d: ICellDiff): string {
  const kind = d.diffType ? (DIFF_WORDS[d.diffType] ?? d.diffType.replace(/_/g, ' ')) : '';
  return kind ? `${cellLabel(d.cellIndex)}: ${kind}` : cellLabel(d.cellIndex);
}

/**
 * The finished (or running) job's one plain sentence under the verdict line: what happened and
 * what to do next. Null when the verdict line says it all.
 */
export function jobSentence(job: IJob): string | null {
  const status = job.status ?? {};
  const nb = job.spec.notebook?.path ?? '';
  const reason = status.reason ?? '';
  const message = plainMessage(status.message, nb);
  const comparison = status.comparisonResult;
  switch (status.phase) {
    case 'Succeeded': {
      const golden = job.spec.goldenNotebook?.path;
      if (comparison && golden) {
        return `Every cell ran, and the outputs match ${basename(golden)}.`;
      }
      return 'Every cell ran without an error.';
    }
    case 'Failed':
      break;
    default:
      return reason === 'Queued'
        ? `Waiting for a free slot: ${message || 'other validations run first.'}`
        : null;
  }
  switch (reason) {
    case 'Cancelled':
      return 'The validation was cancelled before it finished. Validate again to get a verdict.';
    case 'BuildFailed':
      return `The environment could not be built. ${stripLead(message, /^The environment build failed:\s*/)} The build log below says why; check the notebook’s requirements.`.trim();
    case 'BuildTimedOut':
      return `The environment took too long to build. ${message} Try again, or raise the build timeout in the server’s settings.`.trim();
    case 'ValidationTimedOut':
      return `${message || 'The validation did not finish in time.'} Raise the timeout in Options…, or make the slow cell faster.`;
    case 'InvalidInput':
      return `The validation could not start: ${lowerFirst(message) || 'the request was refused.'} Fix it in Options… and validate again.`;
    case 'InfrastructureFailed':
      return `Not the notebook’s fault: ${lowerFirst(message) || 'something on the server failed.'} Validate again; if it keeps happening, tell whoever runs the server.`;
    default:
      break;
  }
  const results = status.results ?? [];
  const idx = status.failedCellIndex;
  const failed =
    results.find(r => r.status === 'Failure') ??
    (idx !== undefined && idx !== null
      ? results.find(r => r.cellIndex === idx && (r.status === 'Failure' || !!r.errorName))
      : undefined);
  const mismatch = !!comparison && comparison.result !== 'matched';
  if (failed || (idx !== undefined && idx !== null && !mismatch)) {
    const cell = failed?.cellIndex ?? (idx as number);
    return `${cellLabel(cell)} raised ${failed?.errorName ?? 'an error'}; the cells after it did not run. Fix the cell and validate again.`;
  }
  if (mismatch) {
    const n = comparison.mismatchedCells ?? comparison.diffs?.length ?? 0;
    const golden = basename(job.spec.goldenNotebook?.path ?? 'the golden notebook');
    return `Every cell ran, but ${n} cell${n === 1 ? '' : 's'} differ${n === 1 ? 's' : ''} from ${golden}. If the new output is right, accept it as golden.`;
  }
  return message ? ensureStop(message) : 'The validation failed.';
}

function stripLead(text: string, re: RegExp): string {
  return ensureStop(text.replace(re, ''));
}

function lowerFirst(s: string): string {
  return s && /^[A-Z][a-z]/.test(s) ? s[0].toLowerCase() + s.slice(1) : s;
}

function ensureStop(s: string): string {
  const t = s.trim();
  return !t || /[.!?…)]$/.test(t) ? t : `${t}.`;
}

/** Event reasons in words (the code stays in the event's data-reason). */
export const EVENT_WORDS: Record<string, string> = {
  Accepted: 'Accepted',
  BuildStarted: 'Build started',
  BuildSucceeded: 'Environment built',
  BuildReused: 'Environment reused',
  BuildFailed: 'Build failed',
  BuildTimedOut: 'Build timed out',
  BuildRetried: 'Build retried',
  ValidationStarted: 'Validation started',
  ValidationSucceeded: 'Validation passed',
  ValidationFailed: 'Validation failed',
  ValidationTimedOut: 'Validation timed out',
  ValidationRetried: 'Validation retried',
  Cancelled: 'Cancelled',
  InvalidInput: 'Refused',
  InfrastructureFailed: 'Server fault',
  ImageReuseOff: 'Environment not shared',
  EnvironmentRetired: 'Environment retired',
  Queued: 'Waiting for a slot'
};

/** An event's reason in words ("BuildSucceeded" → "Environment built"; unknown ones spaced out). */
export function eventWords(reason: string | undefined): string {
  const r = reason ?? '';
  return (
    EVENT_WORDS[r] ?? r.replace(/([a-z])([A-Z])/g, '$1 $2').replace(/^./, c => c.toUpperCase())
  );
}

/** Spec keys in the changes sentence ("options changed (podConfig)") in words. */
export function plainChanges(sentence: string): string {
  return sentence.replace(/options changed \(([^)]*)\)/g, (_m, keys: string) => {
    const words = keys
      .split(',')
      .map(k => fieldWords(k.trim()).replace(/^the /, ''))
      .join(', ');
    return `options changed (${words})`;
  });
}

/** Whether a search for the cause has something to search: packages, Python or requirements moved. */
export function somethingToSearch(changes: IChanges | null | undefined): boolean {
  if (!changes?.since) {
    return false;
  }
  const c = changes as Record<string, unknown>;
  const packages = c.packages as { changedAny?: boolean } | null | undefined;
  const requirements = c.requirements as { changed?: boolean } | undefined;
  if (packages === undefined && c.python === undefined && requirements === undefined) {
    // an older server without the structured summary: read the sentence
    return /→/.test(changes.sentence) || /requirements changed/.test(changes.sentence);
  }
  return !!(packages?.changedAny || c.python || c.baseImage || requirements?.changed);
}

/**
 * A reused environment's line ("Environment: reused (built 3 days ago)"), or null when the job
 * built its own (buildStatus.builtAt, set when a cached environment stood for the build).
 */
export function reusedText(job: IJob, now: number): string | null {
  const bs = job.status?.buildStatus;
  const reused =
    !!bs?.builtAt ||
    (job.status?.transitions ?? []).some(t => t.reason === 'BuildReused') ||
    /^Reused\b/.test(String(bs?.message ?? ''));
  if (!reused) {
    return null;
  }
  const built = parseTime(bs?.builtAt ?? null);
  return built === null ? 'reused' : `reused (built ${agoWords(built, now)})`;
}

/** "3 days ago", "2 min ago", "just now". */
export function agoWords(ms: number, now: number): string {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 45) {
    return 'just now';
  }
  const unit = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'} ago`;
  if (s < 3600) {
    return `${Math.max(1, Math.round(s / 60))} min ago`;
  }
  if (s < 86400) {
    return unit(Math.floor(s / 3600), 'hour');
  }
  return unit(Math.floor(s / 86400), 'day');
}

export { formatAgo };
