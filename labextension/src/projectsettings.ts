/**
 * The project's settings (issue 42; docs/jupyterlab.md, "Options that live with the project"): a `[tool.nbvalidation]` table in the project's pyproject.toml, or nbvalidation.toml,
 * read and written by the server (GET/PUT …/project-settings). The Options dialog shows the
 * merged options of a notebook and writes the notebook's own entry. Pure: the mapping between
 * the dialog's fields and the partial spec the file holds (same field names and shapes as the
 * REST spec, except that goldenNotebook.path is relative to the notebook's folder).
 */
import type { IValidateOptions } from './options';
import { buildSpec, rootRelative } from './spec';
import type { IJobSpec } from './types';

/** A partial job spec, as the settings file holds it (no `notebook`). */
export type PartialSpec = Omit<Partial<IJobSpec>, 'notebook'> & Record<string, unknown>;

/** GET/PUT project-settings' answer. */
export interface IProjectSettings {
  /** server-relative path of the settings file that applies, or the one that would be written */
  file: string;
  exists: boolean;
  /** the merged partial spec of this notebook: defaults, then every matching entry in order */
  options: PartialSpec;
  /** only this notebook's own entry ({} if none) */
  entry: PartialSpec;
}

/** The leaves of a partial spec the dialog edits (every other field of an entry is kept as it is). */
export const DIALOG_LEAVES: readonly string[][] = [
  ['goldenNotebook', 'path'],
  ['timeout'],
  ['cellTimeout'],
  ['comparisonConfig', 'floatingPointTolerance'],
  ['comparisonConfig', 'relativeTolerance'],
  ['comparisonConfig', 'ignoreOutputTypes'],
  ['comparisonConfig', 'lax'],
  ['parameters'],
  ['podConfig', 'buildConfig', 'enabled']
];

function getLeaf(obj: unknown, path: readonly string[]): unknown {
  let cur: unknown = obj;
  for (const k of path) {
    if (!cur || typeof cur !== 'object' || Array.isArray(cur)) {
      return undefined;
    }
    cur = (cur as Record<string, unknown>)[k];
  }
  return cur;
}

function setLeaf(obj: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let cur = obj;
  for (const k of path.slice(0, -1)) {
    const next = cur[k];
    if (!next || typeof next !== 'object' || Array.isArray(next)) {
      cur[k] = {};
    } else {
      cur[k] = { ...(next as Record<string, unknown>) };
    }
    cur = cur[k] as Record<string, unknown>;
  }
  cur[path[path.length - 1]] = value;
}

function deleteLeaf(obj: Record<string, unknown>, path: readonly string[]): void {
  const parents: Array<[Record<string, unknown>, string]> = [];
  let cur: Record<string, unknown> = obj;
  for (const k of path.slice(0, -1)) {
    const next = cur[k];
    if (!next || typeof next !== 'object' || Array.isArray(next)) {
      return;
    }
    cur[k] = { ...(next as Record<string, unknown>) };
    parents.push([cur, k]);
    cur = cur[k] as Record<string, unknown>;
  }
  delete cur[path[path.length - 1]];
  // drop tables left empty ({comparisonConfig: {}})
  for (let i = parents.length - 1; i >= 0; i--) {
    const [parent, key] = parents[i];
    if (Object.keys(parent[key] as Record<string, unknown>).length === 0) {
      delete parent[key];
    }
  }
}

function same(a: unknown, b: unknown): boolean {
  // 60 (seconds, as a file may say) and "60s" (as the dialog sends it) are the same duration
  const norm = (v: unknown) => (typeof v === 'number' ? [v, `${v}s`] : [v]);
  return norm(a).some(x => norm(b).some(y => JSON.stringify(x) === JSON.stringify(y)));
}

function text(v: unknown): string {
  return v === undefined || v === null ? '' : String(v);
}

/** The dialog's values from a notebook's merged options (`defaults` where they set nothing). */
export function valuesFromOptions(
  options: PartialSpec,
  defaults: IValidateOptions
): IValidateOptions {
  const c = (options.comparisonConfig ?? {}) as Record<string, unknown>;
  const ignore = c.ignoreOutputTypes;
  const params = options.parameters;
  const enabled = getLeaf(options, ['podConfig', 'buildConfig', 'enabled']);
  return {
    goldenPath: text(getLeaf(options, ['goldenNotebook', 'path'])) || defaults.goldenPath,
    buildEnabled: typeof enabled === 'boolean' ? enabled : defaults.buildEnabled,
    timeout: text(options.timeout) || defaults.timeout,
    cellTimeout: text(options.cellTimeout) || defaults.cellTimeout,
    absTolerance: text(c.floatingPointTolerance) || defaults.absTolerance,
    relTolerance: text(c.relativeTolerance) || defaults.relTolerance,
    ignoreOutputs: Array.isArray(ignore) ? ignore.join(', ') : defaults.ignoreOutputs,
    parameters:
      params && typeof params === 'object' && !Array.isArray(params)
        ? Object.entries(params as Record<string, unknown>)
            .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
            .join('\n')
        : defaults.parameters,
    lax: c.lax === true || (c.lax === undefined && defaults.lax)
  };
}

/**
 * A golden path as the settings file keeps it: relative to the notebook's folder. The dialog
 * takes it that way too, or from the server's root with a leading "/" (made relative here).
 */
export function goldenForFile(notebookPath: string, golden: string): string {
  const g = golden.trim();
  if (!g.startsWith('/')) {
    return g.replace(/^\.\//, '');
  }
  const target = rootRelative(g).split('/');
  const folder = rootRelative(notebookPath).split('/').slice(0, -1);
  let i = 0;
  while (i < folder.length && i < target.length - 1 && folder[i] === target[i]) {
    i++;
  }
  return [...folder.slice(i).map(() => '..'), ...target.slice(i)].join('/');
}

/**
 * The notebook's own entry after the dialog: `current.entry` with the dialog's fields replaced.
 * A field is written when the entry had it or when it differs from what the notebook gets
 * anyway (`current.options`, the merged defaults and entries); a field emptied in the dialog
 * leaves the entry. Fields the dialog does not show (inputFiles, sanitizers, …) are kept.
 * Call checkOptions first (buildSpec throws on refused input).
 */
export function entryFromValues(
  notebookPath: string,
  values: IValidateOptions,
  current: Pick<IProjectSettings, 'options' | 'entry'>
): PartialSpec {
  const spec = buildSpec(notebookPath, { ...values, goldenPath: '' }) as unknown as Record<
    string,
    unknown
  >;
  const golden = goldenForFile(notebookPath, values.goldenPath);
  if (golden) {
    spec.goldenNotebook = { path: golden };
  }
  if (!values.lax) {
    // unchecked: the same as absent
    deleteLeaf(spec, ['comparisonConfig', 'lax']);
  }
  const entry = JSON.parse(JSON.stringify(current.entry ?? {})) as Record<string, unknown>;
  for (const leaf of DIALOG_LEAVES) {
    const value = getLeaf(spec, leaf);
    const inEntry = getLeaf(entry, leaf) !== undefined;
    let inherited = getLeaf(current.options, leaf);
    if (leaf[0] === 'podConfig' && inherited === undefined) {
      inherited = true; // the build is on unless something says otherwise
    }
    if (leaf[1] === 'lax' && inherited === undefined) {
      inherited = undefined;
    }
    if (value === undefined) {
      if (inEntry) {
        deleteLeaf(entry, leaf);
      }
      continue;
    }
    if (inEntry || !same(value, inherited)) {
      setLeaf(entry, leaf, value);
    }
  }
  return entry as PartialSpec;
}

/** Where the options are kept, in words ("Saved in lessons/pyproject.toml ([tool.nbvalidation])"). */
export function fileWords(settings: Pick<IProjectSettings, 'file' | 'exists'>): string {
  const table = /(^|\/)pyproject\.toml$/.test(settings.file) ? ' ([tool.nbvalidation])' : '';
  return `${settings.file}${table}${settings.exists ? '' : ' — created when you save'}`;
}
