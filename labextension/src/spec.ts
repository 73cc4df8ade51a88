/** Job specs submitted by the Validate commands (pure). */
import type { IJobSpec } from './types';

export interface ISpecOptions {
  goldenPath?: string;
  buildEnabled?: boolean;
  timeout?: string;
}

/** Normalise a user-typed path to one relative to the server root. */
export function rootRelative(path: string): string {
  return path.trim().replace(/^\/+/, '').replace(/^\.\//, '');
}

export function buildSpec(notebookPath: string, options: ISpecOptions = {}): IJobSpec {
  const spec: IJobSpec = { notebook: { path: rootRelative(notebookPath) } };
  const golden = rootRelative(options.goldenPath ?? '');
  if (golden) {
    spec.goldenNotebook = { path: golden };
  }
  const timeout = (options.timeout ?? '').trim();
  if (timeout) {
    spec.timeout = timeout;
  }
  if (options.buildEnabled !== undefined) {
    spec.podConfig = { buildConfig: { enabled: options.buildEnabled } };
  }
  return spec;
}

const DURATION_RE = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/;

/** Same accepted forms as the server ("30m", "1h30m", "90s"); empty is fine. */
export function isValidTimeout(value: string): boolean {
  const v = value.trim();
  return v === '' || DURATION_RE.test(v);
}
