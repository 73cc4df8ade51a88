/**
 * Job specs submitted by the Validate commands, and the checks of what the
 * Options dialog's fields hold (pure: no JupyterLab imports). The checks say
 * in words what the server's spec validation (jupyter_nbvalidation/core/model.py)
 * would refuse, naming the field, so a typo is caught before anything is
 * submitted; the server stays the judge (its 400 names the spec field, which
 * {@link optionOfSpecField} maps back to the dialog's field).
 */
import {
  DURATION_PATTERN,
  MAX_DURATION_SECONDS,
  MAX_PARAMETERS,
  MAX_PARAMETERS_BYTES,
  MAX_PARAMETER_NAME_CHARS,
  MAX_PATTERNS,
  MAX_PATTERN_CHARS,
  MAX_TOLERANCE,
  OUTPUT_SELECTOR_PATTERN,
  PARAMETER_NAME_PATTERN
} from './spec.generated';
import type { IComparisonConfig, SpecField } from './spec.generated';
import type { IJobSpec } from './types';
import { plainMessage } from './words';

/** What the Options dialog holds: the text the user typed, as typed. */
export interface ISpecOptions {
  goldenPath?: string;
  buildEnabled?: boolean;
  /** overall validation timeout: a duration ("30m", "1h30m") or seconds ("90") */
  timeout?: string;
  /** per-cell timeout, same forms */
  cellTimeout?: string;
  /** comparisonConfig.floatingPointTolerance, a non-negative number */
  absTolerance?: string;
  /** comparisonConfig.relativeTolerance, a non-negative number */
  relTolerance?: string;
  /** comparisonConfig.ignoreOutputTypes: selectors separated by commas or spaces */
  ignoreOutputs?: string;
  /** spec.parameters: one NAME=VALUE per line, VALUE read as JSON */
  parameters?: string;
  /** comparisonConfig.lax */
  lax?: boolean;
}

export type OptionKey = keyof ISpecOptions;

/** One refused field: the dialog field, the spec field it becomes, and why. */
export interface IOptionError {
  option: OptionKey | null;
  field: string;
  message: string;
}

/** The dialog's words for each field (used in the messages). */
export const OPTION_LABELS: Record<OptionKey, string> = {
  goldenPath: 'Golden notebook',
  buildEnabled: 'Build',
  timeout: 'Timeout',
  cellTimeout: 'Cell timeout',
  absTolerance: 'Absolute tolerance',
  relTolerance: 'Relative tolerance',
  ignoreOutputs: 'Ignored outputs',
  parameters: 'Parameters',
  lax: 'Lax mode'
};

/** The spec field each dialog field becomes (a field the server's spec table has: checked by tsc). */
export const OPTION_FIELDS: Record<OptionKey, SpecField> = {
  goldenPath: 'goldenNotebook.path',
  buildEnabled: 'podConfig.buildConfig.enabled',
  timeout: 'timeout',
  cellTimeout: 'cellTimeout',
  absTolerance: 'comparisonConfig.floatingPointTolerance',
  relTolerance: 'comparisonConfig.relativeTolerance',
  ignoreOutputs: 'comparisonConfig.ignoreOutputTypes',
  parameters: 'parameters',
  lax: 'comparisonConfig.lax'
};

// The server's limits (spec_table.py, through spec.generated.ts).
export {
  MAX_DURATION_SECONDS,
  MAX_PARAMETERS,
  MAX_PARAMETERS_BYTES,
  MAX_PARAMETER_NAME_CHARS,
  MAX_TOLERANCE
};
export const MAX_SELECTORS = MAX_PATTERNS;
export const MAX_SELECTOR_CHARS = MAX_PATTERN_CHARS;

/** Normalise a user-typed path to one relative to the server root. */
export function rootRelative(path: string): string {
  return path.trim().replace(/^\/+/, '').replace(/^\.\//, '');
}

/**
 * The golden notebook's path as the server takes it (root-relative), from what the dialog
 * was given: relative to the notebook's folder, as `%nbvalidate --golden` reads it
 * ("golden.ipynb", "../expected/nb.ipynb"), or from the server's root with a leading "/".
 * A path that climbs above the root is passed on as it is: the server refuses it, naming
 * the field.
 */
export function goldenSpecPath(notebookPath: string, golden: string): string {
  const g = golden.trim();
  if (!g) {
    return '';
  }
  if (g.startsWith('/')) {
    return rootRelative(g);
  }
  const parts = rootRelative(notebookPath).split('/').slice(0, -1);
  for (const seg of g.split('/')) {
    if (seg === '' || seg === '.') {
      continue;
    }
    if (seg === '..') {
      if (!parts.length) {
        return [...rootRelative(notebookPath).split('/').slice(0, -1), g].join('/');
      }
      parts.pop();
      continue;
    }
    parts.push(seg);
  }
  return parts.join('/');
}

const DURATION_RE = new RegExp(DURATION_PATTERN);
const DURATION_PART = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
const UNIT: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };
const SECONDS_RE = /^\d+(?:\.\d+)?$/;

/** Same accepted forms as the server ("30m", "1h30m", "90s"); empty is fine. */
export function isValidTimeout(value: string): boolean {
  const v = value.trim();
  return v === '' || DURATION_RE.test(v);
}

/** A duration as the spec takes it: "10m" as it is, a plain number of seconds as "60s" (as the CLI does). */
export function durationValue(value: string): string {
  const v = value.trim();
  return SECONDS_RE.test(v) ? `${Number(v)}s` : v;
}

/** Seconds of a duration the server accepts, or a reason it would not. */
function durationError(value: string): string | null {
  const v = durationValue(value);
  if (!DURATION_RE.test(v)) {
    return `"${value.trim()}" is not a duration such as 30m, 1h30m, 90s or 60 (seconds)`;
  }
  let seconds = 0;
  v.replace(DURATION_PART, (_all, n: string, unit: string) => {
    seconds += Number(n) * UNIT[unit];
    return '';
  });
  if (!(seconds > 0)) {
    return 'must be positive';
  }
  if (seconds > MAX_DURATION_SECONDS) {
    return 'must be at most 24h';
  }
  return null;
}

const NUMBER_RE = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

function toleranceError(value: string): string | null {
  const v = value.trim();
  if (!NUMBER_RE.test(v)) {
    return `"${v}" is not a number (e.g. 1e-6 or 0.01)`;
  }
  const n = Number(v);
  if (!Number.isFinite(n)) {
    return 'must be a finite number';
  }
  if (n < 0) {
    return 'must be a non-negative number';
  }
  if (n > MAX_TOLERANCE) {
    return 'must be at most 1e+09';
  }
  return null;
}

/** compare.OUTPUT_SELECTOR_PATTERN: an output type, a stream or a MIME type. */
export const OUTPUT_SELECTOR_RE = new RegExp(OUTPUT_SELECTOR_PATTERN);

/** The selectors typed into "Ignored outputs" (commas or spaces between them). */
export function splitSelectors(value: string): string[] {
  return value
    .split(/[\s,]+/)
    .map(s => s.trim())
    .filter(s => s !== '');
}

const PARAMETER_NAME_RE = new RegExp(PARAMETER_NAME_PATTERN);
const PYTHON_KEYWORDS = new Set(
  (
    'False None True and as assert async await break class continue def del elif else except ' +
    'finally for from global if import in is lambda nonlocal not or pass raise return try while with yield'
  ).split(' ')
);

/** A parameter's value: JSON when it parses, papermill's True/False/None, else the text as a string (as `-p`). */
export function parameterValue(text: string): unknown {
  const papermill: Record<string, unknown> = { True: true, False: false, None: null };
  if (text in papermill) {
    return papermill[text];
  }
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** A value that starts as JSON does (a list, an object, a string) but does not parse is a typo, not a string. */
const LOOKS_LIKE_JSON = /^[[{"]/;

function parsesAsJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

function checkJsonValue(value: unknown): string | null {
  if (typeof value === 'number' && !Number.isFinite(value)) {
    return 'must be a finite number';
  }
  if (Array.isArray(value)) {
    for (const v of value) {
      const e = checkJsonValue(v);
      if (e) {
        return e;
      }
    }
  } else if (value !== null && typeof value === 'object') {
    for (const v of Object.values(value as Record<string, unknown>)) {
      const e = checkJsonValue(v);
      if (e) {
        return e;
      }
    }
  }
  return null;
}

/**
 * "Parameters": one `NAME=VALUE` per line (blank lines and `#` comments
 * skipped), VALUE read as `-p` reads it. Returns the parameters, or the
 * errors naming `parameters.NAME` (or the line).
 */
export function parseParameters(text: string): {
  parameters: Record<string, unknown>;
  errors: IOptionError[];
} {
  const parameters: Record<string, unknown> = {};
  const errors: IOptionError[] = [];
  const fail = (field: string, message: string) =>
    errors.push({ option: 'parameters', field, message });
  const lines = text.split(/\r?\n/);
  lines.forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) {
      return;
    }
    const eq = line.indexOf('=');
    if (eq < 0) {
      fail('parameters', `line ${i + 1}: "${line}" is not NAME=VALUE`);
      return;
    }
    const name = line.slice(0, eq).trim();
    const valueText = line.slice(eq + 1).trim();
    const field = `parameters.${name}`;
    if (!PARAMETER_NAME_RE.test(name)) {
      fail(
        field,
        `line ${i + 1}: "${name}" must be a Python identifier (letters, digits and '_', not starting with a digit)`
      );
      return;
    }
    if (PYTHON_KEYWORDS.has(name)) {
      fail(field, `line ${i + 1}: ${name} is a Python keyword`);
      return;
    }
    if (name.length > MAX_PARAMETER_NAME_CHARS) {
      fail(field, `line ${i + 1}: the name is longer than ${MAX_PARAMETER_NAME_CHARS} characters`);
      return;
    }
    if (Object.prototype.hasOwnProperty.call(parameters, name)) {
      fail(field, `line ${i + 1}: ${name} is given twice`);
      return;
    }
    const value = parameterValue(valueText);
    if (LOOKS_LIKE_JSON.test(valueText) && !parsesAsJson(valueText)) {
      fail(field, `line ${i + 1}: ${valueText} is not valid JSON`);
      return;
    }
    const bad = checkJsonValue(value);
    if (bad) {
      fail(field, `line ${i + 1}: ${bad}`);
      return;
    }
    parameters[name] = value;
  });
  if (!errors.length) {
    const count = Object.keys(parameters).length;
    if (count > MAX_PARAMETERS) {
      fail('parameters', `${count} entries; the limit is ${MAX_PARAMETERS}`);
    } else {
      const bytes = new TextEncoder().encode(JSON.stringify(parameters)).length;
      if (bytes > MAX_PARAMETERS_BYTES) {
        fail('parameters', `${bytes} bytes as JSON; the limit is ${MAX_PARAMETERS_BYTES}`);
      }
    }
  }
  return { parameters, errors };
}

/** Every field of the dialog the server would refuse (empty = fine). */
export function checkOptions(options: ISpecOptions): IOptionError[] {
  const errors: IOptionError[] = [];
  const add = (option: OptionKey, message: string, field: string = OPTION_FIELDS[option]) =>
    errors.push({ option, field, message });
  for (const key of ['timeout', 'cellTimeout'] as const) {
    const v = (options[key] ?? '').trim();
    const e = v ? durationError(v) : null;
    if (e) {
      add(key, e);
    }
  }
  for (const key of ['absTolerance', 'relTolerance'] as const) {
    const v = (options[key] ?? '').trim();
    const e = v ? toleranceError(v) : null;
    if (e) {
      add(key, e);
    }
  }
  const selectors = splitSelectors(options.ignoreOutputs ?? '');
  if (selectors.length > MAX_SELECTORS) {
    add('ignoreOutputs', `${selectors.length} selectors; the limit is ${MAX_SELECTORS}`);
  }
  selectors.forEach((s, i) => {
    if (s.length > MAX_SELECTOR_CHARS || !OUTPUT_SELECTOR_RE.test(s)) {
      add(
        'ignoreOutputs',
        `"${s}" is not an output type (stream, execute_result, display_data, error), ` +
          'a stream (stream:stderr) or a MIME type (text/html, image/*)',
        `${OPTION_FIELDS.ignoreOutputs}[${i}]`
      );
    }
  });
  errors.push(...parseParameters(options.parameters ?? '').errors);
  return errors;
}

/**
 * One line per error, naming the dialog's field in words: "Absolute tolerance: "abc" is not a
 * number". The spec field stays in the row's data-field (and the REST API's 400), never in the
 * words a person reads.
 */
export function describeOptionError(e: IOptionError): string {
  const label = e.option ? OPTION_LABELS[e.option] : 'Options';
  return `${label}: ${plainMessage(e.message)}`;
}

/** The dialog field a spec field of a server error belongs to ("parameters.x" → parameters), or null. */
export function optionOfSpecField(field: string | null | undefined): OptionKey | null {
  if (!field) {
    return null;
  }
  // "spec.X" (POST …/jobs) or "options.X" (PUT …/project-settings)
  const f = field.replace(/^(spec|options)\./, '');
  for (const [key, specField] of Object.entries(OPTION_FIELDS) as Array<[OptionKey, string]>) {
    if (f === specField || f.startsWith(`${specField}.`) || f.startsWith(`${specField}[`)) {
      return key;
    }
  }
  if (f.startsWith('goldenNotebook')) {
    return 'goldenPath';
  }
  if (f.startsWith('podConfig.buildConfig')) {
    return 'buildEnabled';
  }
  return null;
}

/**
 * The spec the dialog's fields give (empty fields left out: the server's
 * defaults apply). Call {@link checkOptions} first: this throws on input it
 * refuses.
 */
export function buildSpec(notebookPath: string, options: ISpecOptions = {}): IJobSpec {
  const errors = checkOptions(options);
  if (errors.length) {
    // a programming error (checkOptions comes first): the spec field, for whoever debugs it
    throw new Error(errors.map(e => `${e.field}: ${e.message}`).join('\n'));
  }
  const spec: IJobSpec = { notebook: { path: rootRelative(notebookPath) } };
  const golden = goldenSpecPath(notebookPath, options.goldenPath ?? '');
  if (golden) {
    spec.goldenNotebook = { path: golden };
  }
  const timeout = (options.timeout ?? '').trim();
  if (timeout) {
    spec.timeout = durationValue(timeout);
  }
  const cellTimeout = (options.cellTimeout ?? '').trim();
  if (cellTimeout) {
    spec.cellTimeout = durationValue(cellTimeout);
  }
  const comparison: IComparisonConfig = {};
  const abs = (options.absTolerance ?? '').trim();
  if (abs) {
    comparison.floatingPointTolerance = Number(abs);
  }
  const rel = (options.relTolerance ?? '').trim();
  if (rel) {
    comparison.relativeTolerance = Number(rel);
  }
  const selectors = splitSelectors(options.ignoreOutputs ?? '');
  if (selectors.length) {
    comparison.ignoreOutputTypes = selectors;
  }
  if (options.lax) {
    comparison.lax = true;
  }
  if (Object.keys(comparison).length) {
    spec.comparisonConfig = comparison;
  }
  const { parameters } = parseParameters(options.parameters ?? '');
  if (Object.keys(parameters).length) {
    spec.parameters = parameters;
  }
  if (options.buildEnabled !== undefined) {
    spec.podConfig = { buildConfig: { enabled: options.buildEnabled } };
  }
  return spec;
}
