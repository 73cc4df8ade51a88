/**
 * The options a notebook was last validated with in the Options dialog, kept
 * per notebook (by its server path) in the browser's localStorage, so that
 * "Validate" repeats them — a golden notebook set once keeps being compared
 * with, also after "Accept as golden" — and the dialog opens with them.
 * Nothing is kept when storage is unavailable (private windows, quotas).
 */
import type { IValidateOptions } from './options';

const PREFIX = 'jupyter-nbvalidation:options:';

function storage(): Storage | null {
  try {
    return typeof window !== 'undefined' && window.localStorage ? window.localStorage : null;
  } catch {
    return null;
  }
}

/** Remember `options` for the notebook at `path` (a server path). */
export function rememberOptions(
  path: string,
  options: IValidateOptions,
  store: Storage | null = storage()
): void {
  try {
    store?.setItem(PREFIX + path, JSON.stringify(options));
  } catch {
    // full or refused: the next Validate uses the defaults, as before
  }
}

/** The options last used for the notebook at `path`, or null. */
export function rememberedOptions(
  path: string,
  store: Storage | null = storage()
): IValidateOptions | null {
  try {
    const text = store?.getItem(PREFIX + path);
    if (!text) {
      return null;
    }
    const value = JSON.parse(text) as unknown;
    if (!value || typeof value !== 'object' || Array.isArray(value)) {
      return null;
    }
    const o = value as Record<string, unknown>;
    const str = (k: string): string => (typeof o[k] === 'string' ? (o[k] as string) : '');
    return {
      goldenPath: str('goldenPath'),
      buildEnabled: o.buildEnabled !== false,
      timeout: str('timeout'),
      cellTimeout: str('cellTimeout'),
      absTolerance: str('absTolerance'),
      relTolerance: str('relTolerance'),
      ignoreOutputs: str('ignoreOutputs'),
      parameters: str('parameters'),
      lax: o.lax === true
    };
  } catch {
    return null;
  }
}

/** Forget them (the dialog's values were cleared, or the notebook's options reset). */
export function forgetOptions(path: string, store: Storage | null = storage()): void {
  try {
    store?.removeItem(PREFIX + path);
  } catch {
    // nothing kept: nothing to forget
  }
}
